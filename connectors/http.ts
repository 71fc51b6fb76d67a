/**
 * HTTP plumbing shared by the webhook and spreadsheet connectors: the attempt
 * time-out over every request (each checked and connected by http_transport.ts), status classification,
 * Retry-After and error text that names the destination by `scheme://host[:port]`
 * only (its path, query and userinfo may hold secrets) and never shows payload.
 *
 * @module
 */
import { redactUrls, urlOrigin } from "../redact.ts";
import { VERSION } from "../version.ts";
import { type HttpTransport, reasonPhrase } from "./http_transport.ts";
import { blameOfHttpStatus, DeliveryError, type DeliveryReceipt, type PaceHint } from "./types.ts";

/** `User-Agent` of every delivery request. */
export const USER_AGENT = `formrelay/${VERSION}`;

/** What an HTTP connector needs from its surroundings. */
export interface HttpConnectorDeps {
  /** Time-out of one delivery attempt, redirects included, in milliseconds. */
  timeoutMs: number;
  /** Checks each request's host and connects where the guard allows (http_transport.ts). */
  transport: HttpTransport;
}

/** One request of an attempt; redirects are never followed by the transport itself. */
interface HttpRequestInit {
  method: string;
  /** Lower-case names (see jsonRequestHeaders). */
  headers: Record<string, string>;
  body?: string;
}

/** Sends one request of an attempt through the transport, under the attempt's signal. */
type SendRequest = (url: URL, init: HttpRequestInit) => Promise<Response>;

/**
 * Request headers for a JSON delivery: `extra` first, then Content-Type and User-Agent over
 * them. A plain record with lower-case names (two names differing only in case are
 * joined, as in a `Headers`): `fetch` takes it as it is, where it converts a `Headers`
 * object field by field.
 */
export function jsonRequestHeaders(extra: Record<string, string> = {}): Record<string, string> {
  // No prototype: a header may be named "toString" or "__proto__".
  const headers: Record<string, string> = Object.create(null);
  for (const [name, value] of Object.entries(extra)) {
    const key = name.toLowerCase();
    // Leading and trailing spaces and tabs are not part of a header value (RFC 9110).
    const trimmed = value.replace(/^[\t ]+|[\t ]+$/g, "");
    headers[key] = key in headers ? `${headers[key]}, ${trimmed}` : trimmed;
  }
  headers["content-type"] = "application/json";
  headers["user-agent"] = USER_AGENT;
  return headers;
}

/**
 * Attempts that start within this many milliseconds of one another share their time-out
 * signal, so an attempt's time-out ends between `timeoutMs` and this much later. A signal
 * of its own kept each attempt's timer pending for the whole time-out after the attempt
 * ended: tens of thousands of timers and dependent signals at a few thousand deliveries
 * a second, for the garbage collector to trace.
 */
const SHARED_TIMEOUT_MS = 50;
let sharedTimeout: {
  parent: AbortSignal;
  timeoutMs: number;
  until: number;
  signal: AbortSignal;
} | null = null;

/** The time-out signal (combined with `parent`) of an attempt starting now. */
function sharedAttemptSignal(parent: AbortSignal, timeoutMs: number): AbortSignal {
  const now = performance.now();
  const current = sharedTimeout;
  if (
    current !== null && current.parent === parent && current.timeoutMs === timeoutMs &&
    now < current.until
  ) return current.signal;
  const timeout = AbortSignal.timeout(timeoutMs + SHARED_TIMEOUT_MS);
  const signal = AbortSignal.any([parent, timeout]);
  sharedTimeout = { parent, timeoutMs, until: now + SHARED_TIMEOUT_MS, signal };
  return signal;
}

/**
 * Starts one delivery attempt: its requests share one time-out (`deps.timeoutMs`)
 * combined with the caller's signal, and each one's host is checked by the transport.
 *
 * @returns a function sending one request; it throws the guard's DeliveryError for a
 *   refused host, and a transient one on network errors, the time-out and cancellation
 */
export function startAttempt(deps: HttpConnectorDeps, signal: AbortSignal): SendRequest {
  const attemptSignal = sharedAttemptSignal(signal, deps.timeoutMs);
  return async (url, init) => {
    try {
      attemptSignal.throwIfAborted();
      return await deps.transport.request(url, { ...init, signal: attemptSignal });
    } catch (error) {
      if (error instanceof DeliveryError) throw error;
      const reason = attemptSignal.aborted
        ? abortReason(attemptSignal, deps.timeoutMs)
        : networkReason(error);
      // The raw error is not kept as cause: its text carries the full URL.
      throw new DeliveryError(`Cannot deliver to "${urlOrigin(url)}": ${reason}`, {
        permanent: false,
      });
    }
  };
}

/**
 * Ends an attempt with its final answer: the body is cancelled, a 2xx is a receipt,
 * anything else a DeliveryError (408, 429 and 5xx transient with Retry-After, others
 * permanent). A 429, or a 503 with Retry-After, is a refusal for rate (`pace.limited`);
 * rate-limit headers on any answer go into `pace` (readPaceHint).
 *
 * @param detail a note appended to the failure text, e.g. why a redirect was not followed
 */
export async function settleResponse(
  url: URL,
  response: Response,
  detail?: string,
): Promise<DeliveryReceipt> {
  await discardBody(response);
  const status = response.status;
  const pace = readPaceHint(response);
  if (status >= 200 && status < 300) {
    return pace ? { statusCode: status, pace } : { statusCode: status };
  }
  const transient = status === 408 || status === 429 || status >= 500;
  const statusLine = `${status} ${reasonPhrase(response.statusText)}`.trim();
  const note = detail === undefined ? "" : ` (${detail})`;
  throw new DeliveryError(`Cannot deliver to "${urlOrigin(url)}": ${statusLine}${note}`, {
    permanent: !transient,
    blame: blameOfHttpStatus(status),
    statusCode: status,
    retryAfterMs: transient ? parseRetryAfter(response.headers.get("retry-after")) : undefined,
    pace,
  });
}

/**
 * What an answer says about the receiver's pace: `Retry-After` (on 429 and 503, where it
 * means "not before"; a 429 is a refusal for rate, a 503 that has one a refusal while the
 * receiver is down), and the quota
 * headers many APIs send: `X-RateLimit-Remaining` with `X-RateLimit-Reset-After`
 * (seconds, Discord) or `X-RateLimit-Reset` (epoch seconds, GitHub and others), or the
 * IETF draft's `RateLimit-Remaining` with `RateLimit-Reset` (seconds). Undefined when it
 * says nothing.
 */
export function readPaceHint(response: Response, now: number = Date.now()): PaceHint | undefined {
  const { status, headers } = response;
  const hint: PaceHint = {};
  if (status === 429 || status === 503) {
    const retryAfterMs = parseRetryAfter(headers.get("retry-after"), now);
    if (retryAfterMs !== undefined) hint.retryAfterMs = retryAfterMs;
    if (status === 429) hint.limited = true;
    else if (retryAfterMs !== undefined) Object.assign(hint, { limited: true, unavailable: true });
  }
  const remaining = Number(
    headers.get("x-ratelimit-remaining") ?? headers.get("ratelimit-remaining") ?? NaN,
  );
  if (Number.isInteger(remaining) && remaining >= 0) {
    const resetAfterMs = readResetAfter(headers, now);
    if (resetAfterMs !== undefined) Object.assign(hint, { remaining, resetAfterMs });
  }
  return Object.keys(hint).length > 0 ? hint : undefined;
}

/** When a rate-limit window starts afresh (ms from now), from the quota headers. */
function readResetAfter(headers: Headers, now: number): number | undefined {
  const seconds = (name: string) => {
    const value = Number(headers.get(name) ?? NaN);
    return Number.isFinite(value) && value >= 0 ? value : undefined;
  };
  const after = seconds("x-ratelimit-reset-after") ?? seconds("ratelimit-reset");
  if (after !== undefined) return Math.round(after * 1000);
  const reset = seconds("x-ratelimit-reset");
  if (reset === undefined) return undefined;
  // Epoch seconds (a value past 2001), else seconds from now.
  return reset > 1e9 ? Math.max(0, Math.round(reset * 1000 - now)) : Math.round(reset * 1000);
}

/** Releases a response body that is not read. */
export async function discardBody(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => {});
}

/**
 * Reads a Retry-After value: delay-seconds or an HTTP-date.
 *
 * @returns milliseconds to wait (0 for a date in the past), or undefined when absent or invalid
 */
export function parseRetryAfter(
  value: string | null,
  now: number = Date.now(),
): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!/^[A-Za-z]{3,9}, /.test(text) && !/^[A-Za-z]{3} [A-Za-z]{3} /.test(text)) return undefined;
  const date = Date.parse(text.endsWith("GMT") ? text : `${text} GMT`);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

function abortReason(signal: AbortSignal, timeoutMs: number): string {
  const reason = signal.reason;
  if (reason instanceof DOMException && reason.name === "TimeoutError") {
    return `no answer within ${timeoutMs} ms`;
  }
  return "the attempt was cancelled";
}

/**
 * The network error's own text, without the request Deno describes first ("error sending
 * request for url (…): " or "error sending request from … for … (…): "); any other URL in
 * it is cut down to its origin.
 */
function networkReason(error: unknown): string {
  const inner = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const text = inner instanceof Error ? inner.message : String(inner);
  // A refused, reset or dropped connection and an answer that is not HTTP read the same,
  // so that deliveries and test sends cannot be used to scan a host's ports.
  if (CONNECTION_FAILURE.test(text)) return NO_HTTP_SERVICE;
  // A serialised URL holds no space, so the first "): " ends the description.
  return redactUrls(text.replace(/^error sending request\b.*?\): /, "")) || "network error";
}

/** The one text of connection failures (see networkReason). */
const NO_HTTP_SERVICE = "no HTTP service answered";
/** Errors of `fetch` and `node:http` that say whether a port is open and what speaks there. */
const CONNECTION_FAILURE =
  /refused|reset|closed|broken pipe|EPIPE|ECONN|invalid HTTP|Parse Error|unexpected (end|eof)|incomplete message|socket hang up/i;
