/**
 * The outbound address guard: destinations must not reach loopback, private,
 * link-local, CGNAT, multicast, unspecified or otherwise reserved addresses
 * (CONTRACT "Destinations and delivery"), unless ALLOW_PRIVATE_DESTINATIONS is set.
 *
 * The guard answers with the addresses it approved, and connections go to one of them
 * (http.ts, smtp.ts): a name is never resolved a second time by the connection, so a DNS
 * answer that changes between the check and the connection (DNS rebinding) cannot lead
 * to a blocked address.
 *
 * @module
 */
import { DeliveryError } from "./types.ts";

/** Resolves a host name to the addresses of one record type. */
export type ResolveAddresses = (hostname: string, recordType: "A" | "AAAA") => Promise<string[]>;

/** The guard as the connectors use it (tests may pass their own). */
export interface OutboundGuard {
  /** True when every host is allowed: nothing is checked or resolved, connections go by name. */
  readonly allowAll: boolean;
  /**
   * The addresses `hostname` may be reached at, every one checked: the host itself for an
   * IP literal, else the resolver's answer. Connect to one of these; never resolve again.
   *
   * @throws {DeliveryError} permanent for a blocked or invalid host, transient when resolving fails
   */
  approve(hostname: string): Promise<string[]>;
}

/** The guard of a deployment: `allowPrivate` from ALLOW_PRIVATE_DESTINATIONS. */
export function createOutboundGuard(options: CheckHostOptions): OutboundGuard {
  return {
    allowAll: options.allowPrivate,
    async approve(hostname) {
      return await checkDestinationHost(hostname, options) ?? [hostname];
    },
  };
}

/** Options of {@linkcode checkDestinationHost}. */
export interface CheckHostOptions {
  /** When true, every host is allowed and nothing is resolved. */
  allowPrivate: boolean;
  /** The resolver; `Deno.resolveDns` by default (tests inject a fake). */
  resolve?: ResolveAddresses;
}

type Range = [bits: bigint, prefix: number, reason: string];

const LOOPBACK = "a loopback address";
const PRIVATE = "a private address";
const LINK_LOCAL = "a link-local address";
const SHARED = "a shared (CGNAT) address";
const MULTICAST = "a multicast address";
const UNSPECIFIED = "an unspecified address";
const BROADCAST = "a broadcast address";
const RESERVED = "a reserved address";
const DOCUMENTATION = "a documentation address";

/** IPv4 special-purpose ranges (IANA registry) that a destination may not use. */
const IPV4_BLOCKED: Range[] = [
  [ipv4Bits("255.255.255.255"), 32, BROADCAST],
  [ipv4Bits("0.0.0.0"), 8, UNSPECIFIED],
  [ipv4Bits("10.0.0.0"), 8, PRIVATE],
  [ipv4Bits("100.64.0.0"), 10, SHARED],
  [ipv4Bits("127.0.0.0"), 8, LOOPBACK],
  [ipv4Bits("169.254.0.0"), 16, LINK_LOCAL],
  [ipv4Bits("172.16.0.0"), 12, PRIVATE],
  [ipv4Bits("192.0.0.0"), 24, RESERVED],
  [ipv4Bits("192.0.2.0"), 24, DOCUMENTATION],
  [ipv4Bits("192.88.99.0"), 24, RESERVED],
  [ipv4Bits("192.168.0.0"), 16, PRIVATE],
  [ipv4Bits("198.18.0.0"), 15, RESERVED],
  [ipv4Bits("198.51.100.0"), 24, DOCUMENTATION],
  [ipv4Bits("203.0.113.0"), 24, DOCUMENTATION],
  [ipv4Bits("224.0.0.0"), 4, MULTICAST],
  [ipv4Bits("240.0.0.0"), 4, RESERVED],
];

/** IPv6 ranges blocked outright; anything outside 2000::/3 is reserved as well. */
const IPV6_BLOCKED: Range[] = [
  [0n, 128, UNSPECIFIED],
  [1n, 128, LOOPBACK],
  [ipv6Bits("100::"), 64, RESERVED],
  [ipv6Bits("2001::"), 23, RESERVED],
  [ipv6Bits("2001:db8::"), 32, DOCUMENTATION],
  [ipv6Bits("3fff::"), 20, DOCUMENTATION],
  [ipv6Bits("5f00::"), 16, RESERVED],
  [ipv6Bits("fc00::"), 7, PRIVATE],
  [ipv6Bits("fe80::"), 10, LINK_LOCAL],
  [ipv6Bits("fec0::"), 10, PRIVATE],
  [ipv6Bits("ff00::"), 8, MULTICAST],
];

/**
 * IPv6 ranges that carry an IPv4 address in their last 32 bits; a blocked IPv4
 * address is blocked in every form, and some forms are blocked whatever they carry.
 */
const IPV6_EMBEDDING: [bits: bigint, prefix: number, form: string, blocked: string | null][] = [
  [ipv6Bits("::ffff:0:0"), 96, "IPv4-mapped", null],
  [ipv6Bits("::ffff:0:0:0"), 96, "IPv4-translated", null],
  [ipv6Bits("64:ff9b::"), 96, "NAT64", null],
  [ipv6Bits("64:ff9b:1::"), 48, "local-use NAT64", "a local-use NAT64 address"],
  [0n, 96, "IPv4-compatible", "a deprecated IPv4-compatible address"],
];

const GLOBAL_UNICAST: [bigint, number] = [ipv6Bits("2000::"), 3];
const SIX_TO_FOUR: [bigint, number] = [ipv6Bits("2002::"), 16];

/**
 * Tells why an IP address may not be a destination.
 *
 * Accepts IPv4 (also the legacy forms a URL accepts, such as `127.1`) and IPv6,
 * bracketed or not, with or without a zone. IPv4 addresses embedded in IPv6
 * (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are judged by the embedded address.
 *
 * @returns the reason, such as `"a loopback address"`, or null when the address is allowed
 */
export function isBlockedAddress(ip: string): string | null {
  const text = ip.trim().replace(/^\[(.*)\]$/, "$1");
  if (text.includes(":")) {
    const bits = parseIpv6(text);
    return bits === null ? "not an IP address" : ipv6Reason(bits);
  }
  const bits = parseIpv4(normaliseIpv4(text) ?? "");
  return bits === null ? "not an IP address" : ipv4Reason(bits);
}

/**
 * Refuses a destination host that is, or resolves to, a blocked address.
 *
 * IP literals (bracketed IPv6 included) are judged directly, `localhost` and
 * `*.localhost` are loopback, other names are resolved (A and AAAA) and every
 * address must be allowed. With `allowPrivate` nothing is checked or resolved.
 *
 * @returns the approved addresses (IPv4 first), or null with `allowPrivate`
 * @throws {DeliveryError} permanent for a blocked or invalid host, transient when resolving fails
 */
export async function checkDestinationHost(
  hostname: string,
  options: CheckHostOptions,
): Promise<string[] | null> {
  if (options.allowPrivate) return null;
  const host = normaliseHost(hostname);
  if (host === null) throw notAllowed(hostname, "not a valid host name");
  if (host === "localhost" || host.endsWith(".localhost")) throw notAllowed(host, LOOPBACK);
  if (host.includes(":") || parseIpv4(host) !== null) {
    const reason = isBlockedAddress(host);
    if (reason !== null) throw notAllowed(host, reason);
    return [host];
  }
  const addresses = await resolveAll(host, options.resolve ?? resolveWithDeno);
  for (const address of addresses) {
    const reason = isBlockedAddress(address);
    if (reason !== null) throw notAllowed(host, `resolves to "${address}", ${reason}`);
  }
  return addresses;
}

/**
 * Why a destination host may not even be saved: an IP literal or a `localhost` name that
 * is blocked, judged without resolving anything (names are checked when delivering, as
 * their answers may change). Null when allowed, or when only a delivery can tell.
 */
export function literalHostRefusal(hostname: string, allowPrivate: boolean): string | null {
  if (allowPrivate) return null;
  const host = normaliseHost(hostname);
  if (host === null) return null; // the config's own schema speaks about invalid hosts
  const local = host === "localhost" || host.endsWith(".localhost");
  if (!local && !host.includes(":") && parseIpv4(host) === null) return null;
  const reason = local ? LOOPBACK : isBlockedAddress(host);
  return reason === null ? null : notAllowed(host, reason).message;
}

/**
 * What a refusal of a blocked address adds: the way forward for someone trying formrelay
 * with a receiver on their own machine, and that it is not for production.
 */
export const PRIVATE_DESTINATIONS_HINT = " (local and private addresses are allowed only with " +
  "ALLOW_PRIVATE_DESTINATIONS=true, meant for development: `deno task dev` sets it)";

function notAllowed(host: string, reason: string): DeliveryError {
  const subject = reason.startsWith("resolves") ? reason : `is ${reason}`;
  // An invalid name is no private address: the setting would not help it.
  const hint = reason === "not a valid host name" ? "" : PRIVATE_DESTINATIONS_HINT;
  return new DeliveryError(`Destination address is not allowed: "${host}" ${subject}${hint}`, {
    permanent: true,
  });
}

async function resolveWithDeno(hostname: string, recordType: "A" | "AAAA"): Promise<string[]> {
  return await Deno.resolveDns(hostname, recordType);
}

/** Both families are looked up; a failed lookup (other than "no records") fails closed. */
async function resolveAll(host: string, resolve: ResolveAddresses): Promise<string[]> {
  const results = await Promise.allSettled([resolve(host, "A"), resolve(host, "AAAA")]);
  const addresses: string[] = [];
  let failure: unknown = null;
  for (const result of results) {
    if (result.status === "fulfilled") addresses.push(...result.value);
    else if (!(result.reason instanceof Deno.errors.NotFound)) failure ??= result.reason;
  }
  if (failure !== null) {
    const detail = failure instanceof Error ? failure.message : String(failure);
    throw new DeliveryError(`Cannot resolve "${host}": ${detail}`, {
      permanent: false,
      cause: failure,
    });
  }
  if (addresses.length === 0) {
    throw new DeliveryError(`Cannot resolve "${host}": no address found`, { permanent: false });
  }
  return addresses;
}

/** Lower case, no brackets, no trailing dot, IPv4 in dotted form; null when invalid. */
function normaliseHost(hostname: string): string | null {
  const text = hostname.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1");
  if (text.includes(":")) return parseIpv6(text) === null ? null : text;
  const host = normaliseIpv4(text) ?? urlHost(text);
  if (host === null || host === "") return null;
  return host.endsWith(".") ? host.slice(0, -1) : host;
}

/** The host as a URL parser reads it: legacy IPv4 forms become dotted quads. */
function urlHost(text: string): string | null {
  if (text === "" || /[/?#@\\\s]/.test(text)) return null;
  try {
    return new URL(`http://${text}/`).hostname;
  } catch {
    return null;
  }
}

/** The dotted quad of an IPv4 text in any form a URL accepts (`127.1`, `0x7f.0.0.1`). */
function normaliseIpv4(text: string): string | null {
  if (!/^[0-9a-fx.]+$/i.test(text)) return null;
  const host = urlHost(text);
  return host !== null && parseIpv4(host) !== null ? host : null;
}

function parseIpv4(text: string): bigint | null {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (match === null) return null;
  let bits = 0n;
  for (const part of match.slice(1)) {
    const value = Number(part);
    if (value > 255 || (part.length > 1 && part.startsWith("0"))) return null;
    bits = (bits << 8n) | BigInt(value);
  }
  return bits;
}

function parseIpv6(input: string): bigint | null {
  let text = input.replace(/%.*$/, "");
  const groups: number[] = [];
  const lastColon = text.lastIndexOf(":");
  if (text.slice(lastColon + 1).includes(".")) {
    const v4 = parseIpv4(text.slice(lastColon + 1));
    if (v4 === null) return null;
    text = `${text.slice(0, lastColon + 1)}${(v4 >> 16n).toString(16)}:${
      (v4 & 0xffffn).toString(16)
    }`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const parse = (half: string): number[] | null => {
    if (half === "") return [];
    const parts = half.split(":");
    if (!parts.every((part) => /^[0-9a-f]{1,4}$/i.test(part))) return null;
    return parts.map((part) => parseInt(part, 16));
  };
  const head = parse(halves[0]);
  const tail = halves.length === 2 ? parse(halves[1]) : [];
  if (head === null || tail === null) return null;
  if (halves.length === 2) {
    if (head.length + tail.length > 7) return null;
    groups.push(...head, ...new Array(8 - head.length - tail.length).fill(0), ...tail);
  } else {
    if (head.length !== 8) return null;
    groups.push(...head);
  }
  return groups.reduce((bits, group) => (bits << 16n) | BigInt(group), 0n);
}

function inRange(bits: bigint, width: number, base: bigint, prefix: number): boolean {
  const shift = BigInt(width - prefix);
  return bits >> shift === base >> shift;
}

function ipv4Reason(bits: bigint): string | null {
  for (const [base, prefix, reason] of IPV4_BLOCKED) {
    if (inRange(bits, 32, base, prefix)) return reason;
  }
  return null;
}

function ipv6Reason(bits: bigint): string | null {
  for (const [base, prefix, reason] of IPV6_BLOCKED) {
    if (inRange(bits, 128, base, prefix)) return reason;
  }
  for (const [base, prefix, form, blocked] of IPV6_EMBEDDING) {
    if (!inRange(bits, 128, base, prefix)) continue;
    const v4 = bits & 0xffffffffn;
    const reason = ipv4Reason(v4);
    return reason === null ? blocked : `${reason} (${form} ${ipv4Text(v4)})`;
  }
  if (inRange(bits, 128, ...SIX_TO_FOUR)) {
    const v4 = (bits >> 80n) & 0xffffffffn;
    const reason = ipv4Reason(v4);
    return reason === null ? null : `${reason} (6to4 ${ipv4Text(v4)})`;
  }
  return inRange(bits, 128, ...GLOBAL_UNICAST) ? null : RESERVED;
}

function ipv4Text(bits: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => (bits >> shift) & 0xffn).join(".");
}

function ipv4Bits(text: string): bigint {
  return parseIpv4(text)!;
}

function ipv6Bits(text: string): bigint {
  return parseIpv6(text)!;
}
