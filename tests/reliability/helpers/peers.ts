/**
 * A misbehaving TCP peer on 127.0.0.1: for each connection a callback decides to
 * misbehave and close, or to pass the connection through to a healthy upstream port.
 *
 * @module
 */

/** A running peer; `close()` stops it and every connection it holds. */
export interface TcpPeer {
  port: number;
  close(): Promise<void>;
}

/**
 * Starts the peer. `decide` may read and write on the connection; it returns "close"
 * to hang up (with unread input that is a TCP reset) or "pass" to proxy to `upstreamPort`.
 */
export async function startTcpPeer(
  upstreamPort: number,
  decide: (conn: Deno.TcpConn) => Promise<"close" | "pass">,
): Promise<TcpPeer> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  const handlers = new Set<Promise<void>>();
  const closeQuietly = (conn: Deno.Conn) => {
    open.delete(conn);
    try {
      conn.close();
    } catch { /* already closed */ }
  };
  async function handle(conn: Deno.TcpConn) {
    open.add(conn);
    try {
      if (await decide(conn) === "close") return closeQuietly(conn);
      const upstream = await Deno.connect({ hostname: "127.0.0.1", port: upstreamPort });
      open.add(upstream);
      await Promise.allSettled([
        conn.readable.pipeTo(upstream.writable),
        upstream.readable.pipeTo(conn.writable),
      ]);
      closeQuietly(upstream);
    } catch { /* the other side went away */ }
    closeQuietly(conn);
  }
  const accepting = (async () => {
    try {
      for await (const conn of listener) {
        const handler = handle(conn).finally(() => handlers.delete(handler));
        handlers.add(handler);
      }
    } catch { /* listener closed */ }
  })();
  await Promise.resolve();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    async close() {
      try {
        listener.close();
      } catch { /* already closed */ }
      for (const conn of [...open]) closeQuietly(conn);
      await accepting;
      await Promise.allSettled([...handlers]);
    },
  };
}
