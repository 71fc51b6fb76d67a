import type { Hono } from "hono";

/** An app served on 127.0.0.1 for tests that need real sockets. */
export interface Served extends AsyncDisposable {
  origin: string;
  port: number;
  close(): Promise<void>;
}

/** Serves `app` on a free loopback port. */
export function serveApp(app: Hono): Served {
  const controller = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen() {} },
    app.fetch,
  );
  const close = async () => {
    if (!controller.signal.aborted) controller.abort();
    await server.finished;
  };
  return {
    origin: `http://127.0.0.1:${server.addr.port}`,
    port: server.addr.port,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Sends raw bytes over TCP and returns what the server answered until it closed or `until` matched. */
export async function rawHttp(
  port: number,
  request: string | Uint8Array,
  options: { until?: RegExp } = {},
): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    const bytes = typeof request === "string" ? new TextEncoder().encode(request) : request;
    try {
      for (let offset = 0; offset < bytes.length;) {
        offset += await conn.write(bytes.subarray(offset));
      }
    } catch { /* the server may close early, e.g. after a 413 */ }
    let text = "";
    const buffer = new Uint8Array(65536);
    while (true) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      text += new TextDecoder().decode(buffer.subarray(0, n));
      if (options.until?.test(text)) break;
    }
    return text;
  } finally {
    try {
      conn.close();
    } catch { /* already closed */ }
  }
}
