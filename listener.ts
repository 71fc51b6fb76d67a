/**
 * The HTTP listener, guarded against slow and idle clients.
 *
 * `Deno.serve` closes no connection by itself (no head, body or idle time-out, no bound
 * on connections) and ends the process when `accept` fails for want of file
 * descriptors (measured on Deno 2.9.6; see docs/facing-the-internet.md). So formrelay accepts
 * connections itself and hands each one to the runtime's own HTTP server for a single
 * connection (`serveHttpOnConnection`, the function `Deno.serve` is built on), which
 * leaves it what it needs:
 *
 * - a new connection must complete its first request head within `headersTimeoutMs`,
 *   and after a response the next head must be complete within `keepAliveTimeoutMs`;
 * - at most `maxConnections` are open: past it a connection is closed to make room, if
 *   one waits for a request head or is still receiving its request's body (never one
 *   whose request is being worked on): of the address holding the most connections, the
 *   one in that state the longest (a flood from one address pays with its own
 *   connections, not a visitor's). A newcomer never takes room from an address holding
 *   no more connections than its own, and an address that just lost one for room may
 *   not take one back for a while, so attackers holding one connection each do not
 *   trade them with one another at a visitor's expense. With no room to take, the
 *   newcomer gets a 503 with `Retry-After` and is closed. Addresses are grouped as the
 *   rate limit groups them (an IPv6 address by its /64);
 * - a failing `accept` (EMFILE) is logged and retried once a descriptor is freed, never
 *   fatal; running out of descriptors also lowers the bound to what the process could
 *   hold, so that from then on newcomers take the room of waiting connections instead.
 *
 * Deadlines are checked by one timer for all connections, so a request costs two field
 * writes, not a timer of its own. Body deadlines, the minimum body rate and the bound on
 * body memory belong to the routes (routes/http.ts, ingest/body_gate.ts): a route tells
 * the listener while it reads a body (`ConnectionInfo.readingBody`).
 *
 * @module
 */
import type { Logger } from "./log.ts";
// Read where the delivery slots are sized too (config.ts); re-exported for main.ts.
export { ASSUMED_DESCRIPTOR_LIMIT, descriptorLimit } from "./config.ts";
import { addressKey } from "./ingest/client_address.ts";
import type { BodyWatch } from "./body_reading.ts";

/** What a request handler is told about its connection (and may tell the listener). */
export interface ConnectionInfo extends BodyWatch {
  remoteAddr: Deno.NetAddr;
}

/** The limits of the guarded listener. */
export interface ListenerLimits {
  headersTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
}

/** A listening server. */
export interface GuardedServer {
  addr: Deno.NetAddr;
  /** Open connections and how many of them wait for a request head. */
  stats(): { connections: number; waiting: number };
  /** Stops accepting, lets requests under way finish, then closes every connection. */
  shutdown(): Promise<void>;
}

type Handler = (request: Request, info: ConnectionInfo) => Response | Promise<Response>;

/** Deno's HTTP server on one accepted connection (internal, present since Deno 1.x). */
type ServeOnConnection = (
  conn: Deno.Conn,
  signal: AbortSignal,
  handler: (request: Request) => Response | Promise<Response>,
  onError: (error: unknown) => Response,
  onListen: () => void,
) => { finished: Promise<void>; shutdown(): Promise<void> };

/** How often deadlines are checked: they hold to within this. */
const DEADLINE_CHECK_MS = 250;
/** Wait before accepting again after `accept` failed (descriptors exhausted). */
const ACCEPT_RETRY_MS = 50;
/** Descriptors left for KV and deliveries when the bound comes down after EMFILE. */
const DESCRIPTOR_RESERVE = 32;
/** Warnings about failing accepts are logged at most this often. */
const ACCEPT_WARN_EVERY_MS = 5000;

/**
 * How long an address that lost a connection for room is refused room in turn. Without
 * it, addresses holding a connection each took them from one another as fast as they
 * could reconnect, so every connection, a visitor's too, lived only a few milliseconds
 * (docs/design.md, "Figures behind the code's limits"); barred, a newcomer's address
 * that has just lost one waits (503) instead.
 */
const EVICTED_BAR_MS = 2000;
/** Barred addresses remembered at most (beyond it, an evicted address is not barred). */
const MAX_BARRED = 10_000;

/** How long shutdown lets requests under way finish before it closes their connections. */
const SHUTDOWN_GRACE_MS = 5000;

const BUSY_BODY = '{"ok":false,"error":"Server busy: try again later"}';
const BUSY_ANSWER = new TextEncoder().encode(
  "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n" +
    `connection: close\r\ncontent-length: ${BUSY_BODY.length}\r\n\r\n${BUSY_BODY}`,
);

/** One accepted connection's state. */
interface Connection {
  abort: AbortController;
  /** The client's address (an IPv6 one by its /64), which groups its connections. */
  address: string;
  /** Requests under way (HTTP/2 may carry several). */
  busy: number;
  /** When the current wait for a request head began (performance.now()). */
  waitingSince: number;
  /** The head deadline of the current wait (first request or keep-alive). */
  waitLimitMs: number;
  /** When a route began reading the current request's body (null: none being read). */
  bodySince: number | null;
  /** Served and closed: aborting it now would touch a closed resource. */
  done: boolean;
}

/** The runtime's per-connection server, or null where this Deno does not have it. */
function serveOnConnection(): ServeOnConnection | null {
  // deno-lint-ignore no-explicit-any
  const internal = (Deno as any)[(Deno as any).internal];
  const serve = internal?.serveHttpOnConnection;
  return typeof serve === "function" ? serve : null;
}

/** Whether this runtime can run the guarded listener (else main.ts falls back to Deno.serve). */
export function canGuardConnections(): boolean {
  return serveOnConnection() !== null;
}

/** Connections a process with `descriptors` may hold: three quarters, at most 10 000. */
export function maxConnectionsFor(descriptors: number): number {
  return Math.max(64, Math.min(10_000, Math.floor(descriptors * 0.75)));
}

/** Listens on `port` and serves `handler` on every connection, within `limits`. */
export function serveGuarded(
  options: { port: number; hostname?: string; limits: ListenerLimits; logger: Logger },
  handler: Handler,
): GuardedServer {
  const serveOn = serveOnConnection();
  if (serveOn === null) throw new Error("This Deno has no per-connection HTTP server");
  const serveConnection: ServeOnConnection = serveOn;
  const { limits, logger } = options;
  const listener = Deno.listen({ port: options.port, hostname: options.hostname });
  const connections = new Set<Connection>();
  /** Open connections by client address, each in the order they were accepted. */
  const byAddress = new Map<string, Set<Connection>>();
  const servers = new Set<{ finished: Promise<void>; shutdown(): Promise<void> }>();
  let closing = false;
  let lastAcceptWarning = -Infinity;
  /** The connection bound in force: lowered when the process runs out of descriptors. */
  let bound = limits.maxConnections;

  function close(connection: Connection) {
    if (connection.done || connection.abort.signal.aborted) return;
    // The runtime's abort listener throws (from inside the event) when the connection's
    // server ended a moment ago without `finished` having told us yet: that error is
    // kept from ending the process, and only during this call.
    const quiet = (event: ErrorEvent) => event.preventDefault();
    globalThis.addEventListener("error", quiet);
    try {
      connection.abort.abort();
    } finally {
      globalThis.removeEventListener("error", quiet);
    }
  }

  /**
   * Since when a connection may be closed for room (null: not now): while it waits for
   * a request head or its request's body is still arriving, never while a request is
   * being worked on.
   */
  function evictableSince(c: Connection): number | null {
    if (c.abort.signal.aborted) return null;
    if (c.busy === 0) return c.waitingSince;
    return c.bodySince;
  }

  /** Addresses that lost a connection for room, until when they may not take one back. */
  const barred = new Map<string, number>();

  /** Closes `room` for a newcomer, and bars its address from taking room for a while. */
  function evict(room: Connection) {
    const now = performance.now();
    if (barred.size >= MAX_BARRED) {
      for (const [address, until] of barred) if (until <= now) barred.delete(address);
    }
    if (barred.size < MAX_BARRED) barred.set(room.address, now + EVICTED_BAR_MS);
    close(room);
  }

  /** Whether newcomers from `address` may take room now. */
  function mayTakeRoom(address: string): boolean {
    const until = barred.get(address);
    if (until === undefined) return true;
    if (until > performance.now()) return false;
    barred.delete(address);
    return true;
  }

  /**
   * A connection to close for room for a newcomer from `address`: of the address
   * holding the most connections among those with one that may be closed (an address
   * whose connections are all busy does not pass its turn to a lone visitor), the one
   * closable the longest. Null when there is none, or when that address holds no more
   * than the newcomer's own: an address never takes room from one holding as few as it
   * does, so addresses that hold a connection each stop trading them.
   */
  function victim(address: string | null): Connection | null {
    let chosen: Connection | null = null;
    let chosenSince = 0;
    let chosenGroup: Set<Connection> | null = null;
    for (const group of byAddress.values()) {
      if (chosenGroup !== null && group.size < chosenGroup.size) continue;
      for (const c of group) {
        const since = evictableSince(c);
        if (since === null) continue;
        if (chosenGroup === null || group.size > chosenGroup.size || since < chosenSince) {
          chosen = c;
          chosenSince = since;
          chosenGroup = group;
        }
      }
    }
    if (chosenGroup === null || address === null) return chosen;
    const own = byAddress.get(address);
    return own === chosenGroup || chosenGroup.size > (own?.size ?? 0) ? chosen : null;
  }

  const deadlines = setInterval(() => {
    const now = performance.now();
    for (const c of connections) {
      if (c.busy === 0 && now - c.waitingSince > c.waitLimitMs) close(c);
    }
  }, DEADLINE_CHECK_MS);

  function serve(conn: Deno.Conn) {
    const remoteAddr = conn.remoteAddr as Deno.NetAddr;
    const address = addressKey(remoteAddr.hostname);
    if (connections.size >= bound) {
      const room = mayTakeRoom(address) ? victim(address) : null;
      if (room === null) {
        conn.write(BUSY_ANSWER).catch(() => {}).finally(() => conn.close());
        return;
      }
      evict(room);
    }
    const connection: Connection = {
      abort: new AbortController(),
      address,
      busy: 0,
      waitingSince: performance.now(),
      waitLimitMs: limits.headersTimeoutMs,
      bodySince: null,
      done: false,
    };
    const info: ConnectionInfo = {
      remoteAddr,
      readingBody() {
        connection.bodySince = performance.now();
        return () => connection.bodySince = null;
      },
    };
    const server = serveConnection(conn, connection.abort.signal, async (request) => {
      connection.busy++;
      try {
        return await handler(request, info);
      } finally {
        connection.busy--;
        connection.waitingSince = performance.now();
        connection.waitLimitMs = limits.keepAliveTimeoutMs;
      }
    }, (error) => {
      logger.error("request failed in the HTTP server", { error: String(error) });
      return new Response(null, { status: 500 });
    }, () => {});
    // Counted only once the runtime serves it, so a connection it refused leaves no trace.
    connections.add(connection);
    let group = byAddress.get(connection.address);
    if (group === undefined) byAddress.set(connection.address, group = new Set());
    group.add(connection);
    servers.add(server);
    server.finished.catch(() => {}).finally(() => {
      connection.done = true;
      connections.delete(connection);
      group.delete(connection);
      if (group.size === 0) byAddress.delete(connection.address);
      servers.delete(server);
    });
  }

  (async () => {
    while (!closing) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (error) {
        if (closing) break;
        // Out of descriptors (EMFILE) or a connection reset before it was accepted: free
        // a descriptor if a connection waits idle, and try again. Out of descriptors, the
        // bound comes down to what the process held, less room for KV and deliveries.
        const message = error instanceof Error ? error.message : String(error);
        if (message.includes("os error 24") && connections.size - DESCRIPTOR_RESERVE < bound) {
          bound = Math.max(DESCRIPTOR_RESERVE, connections.size - DESCRIPTOR_RESERVE);
        }
        const now = performance.now();
        if (now - lastAcceptWarning > ACCEPT_WARN_EVERY_MS) {
          lastAcceptWarning = now;
          logger.warn("cannot accept connections", {
            error: message,
            connections: connections.size,
            bound,
          });
        }
        const room = victim(null);
        if (room !== null) close(room);
        await new Promise((resolve) => setTimeout(resolve, ACCEPT_RETRY_MS));
        continue;
      }
      try {
        serve(conn);
      } catch (error) {
        // Nothing about one connection may end the accept loop (and with it the process).
        logger.error("cannot serve a connection", { error: String(error) });
        try {
          conn.close();
        } catch { /* taken by the runtime, or closed */ }
      }
    }
  })();

  let stopped: Promise<void> | null = null;
  return {
    addr: listener.addr as Deno.NetAddr,
    stats() {
      let waiting = 0;
      for (const c of connections) if (c.busy === 0) waiting++;
      return { connections: connections.size, waiting };
    },
    shutdown() {
      // A second stop signal during shutdown waits for the same one (the listener is
      // closed once: closing it again throws BadResource).
      return stopped ??= stop();
    },
  };

  /** Stops accepting, lets requests under way finish, then closes every connection. */
  async function stop() {
    closing = true;
    listener.close();
    clearInterval(deadlines);
    // Connections waiting for a head have nothing under way: close them now; the
    // others get a grace period to finish their requests.
    for (const c of connections) if (c.busy === 0) close(c);
    const grace = setTimeout(() => connections.forEach(close), SHUTDOWN_GRACE_MS);
    // Whatever the runtime does with a connection closed mid-shutdown, shutdown ends.
    let giveUp: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.allSettled([...servers].map((s) => s.shutdown())),
      new Promise((resolve) => giveUp = setTimeout(resolve, SHUTDOWN_GRACE_MS + 1000)),
    ]);
    clearTimeout(grace);
    clearTimeout(giveUp);
  }
}
