/**
 * Whose address a request comes from: the connection's, unless the deployment names
 * a header that its own proxy or CDN sets (CLIENT_IP_HEADER). Only then is a header
 * believed, and with X-Forwarded-For only the entry its trusted proxies added
 * (counted from the right), never the client-written first one.
 *
 * @module
 */
import { isIPv4, isIPv6 } from "node:net";

/** The submitter's address as the envelope shows it, and the key its limits count under. */
export interface ClientAddress {
  /** The address (IPv4 or IPv6 text), null when unknown. */
  ip: string | null;
  /** An IPv4 address as it is, an IPv6 address as its /64; "" when unknown. */
  key: string;
}

/** How this deployment learns a client's address. */
export interface ClientAddressRule {
  /** A header set by a trusted proxy (lower case); null: the connection's address. */
  header: string | null;
  /** With X-Forwarded-For: entries appended by trusted proxies, from the right. */
  trustedProxyHops: number;
}

/** The client's address by `rule`, from the header's value and the connection's address. */
export function clientAddress(
  rule: ClientAddressRule,
  headerValue: string | undefined,
  remoteAddr: Deno.Addr | undefined,
): ClientAddress {
  let ip: string | null = null;
  if (rule.header !== null && headerValue) ip = fromHeader(rule, headerValue);
  if (ip === null && remoteAddr && "hostname" in remoteAddr) ip = remoteAddr.hostname;
  return ip !== null && (isIPv4(ip) || isIPv6(ip)) ? { ip, key: limitKey(ip) } : NO_ADDRESS;
}

const NO_ADDRESS: ClientAddress = { ip: null, key: "" };

function fromHeader(rule: ClientAddressRule, value: string): string | null {
  let entry = value;
  if (rule.header === "x-forwarded-for") {
    // Each proxy appends the address it saw; the client may write anything before them.
    // Fewer entries than trusted proxies: the request did not come through all of them,
    // so none of its entries is known to be a proxy's (the connection's address is used).
    const entries = value.split(",");
    if (entries.length < rule.trustedProxyHops) return null;
    entry = entries[entries.length - rule.trustedProxyHops];
  }
  const ip = stripPort(entry.trim());
  return isIPv4(ip) || isIPv6(ip) ? ip : null;
}

/** "203.0.113.5:4711" and "[2001:db8::1]:4711" as the bare address. */
function stripPort(text: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(text);
  if (bracketed) return bracketed[1];
  const v4WithPort = /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(text);
  return v4WithPort ? v4WithPort[1] : text;
}

/**
 * The key per-client limits count under: an IPv4 address whole, an IPv6 address by
 * its /64, since one subscriber usually holds a /64. An IPv4 address written as IPv6
 * (IPv4-mapped `::ffff:a.b.c.d`, or NAT64's `64:ff9b::/96`) counts as that IPv4
 * address, so a client cannot multiply its share by changing how it is written.
 */
function limitKey(ip: string): string {
  if (isIPv4(ip)) return ip;
  const groups = ipv6Groups(ip);
  const embedded = groups.slice(0, 6).join(":");
  if (embedded === "0:0:0:0:0:ffff" || embedded === "64:ff9b:0:0:0:0") {
    const [high, low] = [parseInt(groups[6], 16), parseInt(groups[7], 16)];
    return [high >> 8, high & 255, low >> 8, low & 255].join(".");
  }
  return groups.slice(0, 4).join(":") + "::/64";
}

/** The eight groups of a valid IPv6 address, lower case without leading zeros. */
function ipv6Groups(ip: string): string[] {
  // A trailing dotted quad stands for two groups.
  const hex = ip.toLowerCase().split("%", 1)[0].replace(
    /(\d+)\.(\d+)\.(\d+)\.(\d+)$/,
    (_, a, b, c, d) => `${((+a << 8) | +b).toString(16)}:${((+c << 8) | +d).toString(16)}`,
  );
  const [head, tail = ""] = hex.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = hex.includes("::") && tail !== "" ? tail.split(":") : [];
  const groups = hex.includes("::")
    ? [...left, ...Array(8 - left.length - right.length).fill("0"), ...right]
    : left;
  return groups.map((g) => g.replace(/^0+(?=.)/, ""));
}

/** The key the listener groups a connection's address under (see limitKey). */
export function addressKey(ip: string): string {
  return isIPv4(ip) || isIPv6(ip) ? limitKey(ip) : ip;
}
