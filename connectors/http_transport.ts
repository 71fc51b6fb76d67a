/**
 * Where the HTTP connectors' requests connect: to the addresses the outbound guard
 * approved, never to a second resolution of the name (DNS rebinding).
 *
 * - Every host allowed (ALLOW_PRIVATE_DESTINATIONS=true): `fetch` by name, as before.
 * - An IP literal: judged by the guard without any look-up, then `fetch` (nothing to rebind).
 * - A name: `node:http`/`node:https` with keep-alive agents whose `lookup` is the guard.
 *   A new connection asks the guard (resolve, check every address) and connects to an
 *   address it answered; TLS still verifies the certificate against the name (SNI too).
 *   A pooled connection is reused without a look-up, so there is no DNS query per delivery.
 *
 * Why `node:https`: of the ways weighed on Deno 2.9.6, it alone connects to an address
 * of our choosing and still verifies the certificate against the name, keeping
 * connections alive at about `fetch`'s speed (the others, and the figures, in
 * docs/design.md, "HTTP deliveries connect to the approved address").
 * One difference: `node:https` trusts the bundled roots (`tls.rootCertificates`) and not
 * `DENO_CERT`, which `fetch` honours; a private CA matters for private destinations, and
 * those need ALLOW_PRIVATE_DESTINATIONS=true, which keeps them on `fetch`.
 *
 * @module
 */
import http from "node:http";
import https from "node:https";
import type { LookupFunction } from "node:net";
import tls from "node:tls";
import { concatBytes } from "../bytes.ts";
import type { OutboundGuard } from "./outbound_guard.ts";

/** One request: redirects are never followed here. */
export interface TransportRequest {
  method: string;
  /** Lower-case names. */
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
}

/** Sends requests where the guard allows; `close()` ends the kept-alive connections. */
export interface HttpTransport {
  /**
   * Sends one request and resolves with the answer. On the pinned path its body is the
   * first MAX_KEPT_BYTES of the answer's (the rest read and dropped, up to a bound).
   *
   * @throws the guard's DeliveryError when the host is refused; other errors as they come
   */
  request(url: URL, init: TransportRequest): Promise<Response>;
  close(): void;
}

/** Answer bytes read and dropped at most before a pinned connection is closed instead. */
const MAX_DRAIN_BYTES = 64 * 1024;
/** Answer bytes a pinned request hands out: a chat service's answer fits many times over. */
export const MAX_KEPT_BYTES = 16 * 1024;

/** `response` with `chunks` as its body; as it is when there are none, or it may have none (204). */
function withBody(response: Response, chunks: Uint8Array[]): Response {
  if (chunks.length === 0) return response;
  try {
    const { status, statusText, headers } = response;
    return new Response(concatBytes(chunks), { status, statusText, headers });
  } catch {
    return response;
  }
}

/** A transport for `guard`; `caCerts` are extra trusted CAs (PEM) for the pinned path. */
export function createHttpTransport(
  guard: OutboundGuard,
  options: { caCerts?: string[] } = {},
): HttpTransport {
  const lookup: LookupFunction = (hostname, lookupOptions, callback) => {
    guard.approve(hostname).then((approved) => {
      const all = approved.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
      if (lookupOptions.all) callback(null, all);
      else callback(null, all[0].address, all[0].family);
    }, (error) => callback(error, "", 0));
  };
  // Idle connections are unreferenced by the agent: they never keep the process alive.
  const agentOptions = { keepAlive: true, lookup };
  const agents = {
    "http:": new http.Agent(agentOptions),
    // `ca` replaces the bundled roots: extra CAs are added to them, as fetch's caCerts are.
    "https:": new https.Agent(
      options.caCerts === undefined
        ? agentOptions
        : { ...agentOptions, ca: [...tls.rootCertificates, ...options.caCerts] },
    ),
  };

  return {
    async request(url, init) {
      if (guard.allowAll) return await fetchManual(url, init);
      if (isIpLiteral(url.hostname)) {
        await guard.approve(url.hostname);
        return await fetchManual(url, init);
      }
      return await pinnedRequest(url, init, agents[url.protocol as keyof typeof agents]);
    },
    close() {
      agents["http:"].destroy();
      agents["https:"].destroy();
    },
  };
}

/** Characters of a receiver's reason phrase kept, as of an SMTP reply's text. */
const MAX_REASON_CHARS = 200;

/**
 * A receiver's reason phrase as it may be stored and logged: printable, one line, cut to
 * MAX_REASON_CHARS and "..." (a hostile receiver can send kilobytes; a Response status
 * text takes Latin-1 only).
 */
export function reasonPhrase(text: string): string {
  // deno-lint-ignore no-control-regex -- control characters are what is removed here
  const line = text.replace(/[\x00-\x1f\x7f]+/g, " ").replace(/\s+/g, " ").trim();
  return line.length > MAX_REASON_CHARS ? line.slice(0, MAX_REASON_CHARS) + "..." : line;
}

/** A URL's host is an IP literal: the WHATWG parser writes IPv4 dotted and IPv6 bracketed. */
function isIpLiteral(hostname: string): boolean {
  return hostname.startsWith("[") || /^\d+\.\d+\.\d+\.\d+$/.test(hostname);
}

async function fetchManual(url: URL, init: TransportRequest): Promise<Response> {
  return await fetch(url, { ...init, redirect: "manual" });
}

/**
 * One request through a pinned agent. Its answer's body is the first MAX_KEPT_BYTES of
 * what the receiver sent (chat services say why they refused, or that they accepted,
 * in it); the rest is read and dropped.
 */
function pinnedRequest(url: URL, init: TransportRequest, agent: http.Agent): Promise<Response> {
  const { promise, resolve, reject } = Promise.withResolvers<Response>();
  const body = init.body === undefined ? undefined : new TextEncoder().encode(init.body);
  const headers = { ...init.headers };
  if (body !== undefined) headers["content-length"] = String(body.length);
  const send = url.protocol === "https:" ? https.request : http.request;
  const request = send(url, { method: init.method, headers, agent }, (answer) => {
    let response: Response;
    try {
      const received = new Headers();
      const raw = answer.rawHeaders;
      for (let i = 0; i + 1 < raw.length; i += 2) received.append(raw[i], raw[i + 1]);
      response = new Response(null, {
        status: answer.statusCode,
        statusText: reasonPhrase(answer.statusMessage ?? ""),
        headers: received,
      });
    } catch (error) {
      // An answer a Response cannot hold (a status over 599, a malformed header).
      request.destroy();
      reject(error);
      return;
    }
    // The answer is read to its end first, so its connection is free for the next request
    // (it stays pooled); a long answer closes the connection instead.
    const kept: Uint8Array[] = [];
    const settle = () => resolve(withBody(response, kept));
    let drained = 0;
    answer.on("data", (chunk: Uint8Array) => {
      if (drained < MAX_KEPT_BYTES) kept.push(chunk.subarray(0, MAX_KEPT_BYTES - drained));
      drained += chunk.length;
      if (drained > MAX_DRAIN_BYTES) {
        request.destroy();
        settle();
      }
    });
    answer.once("end", settle);
    answer.once("close", settle);
    answer.on("error", settle);
  });
  const onAbort = () => request.destroy(init.signal.reason);
  init.signal.addEventListener("abort", onAbort, { once: true });
  request.once("close", () => init.signal.removeEventListener("abort", onAbort));
  request.on("error", reject);
  request.end(body);
  return promise;
}
