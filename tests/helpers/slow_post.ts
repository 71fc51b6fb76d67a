/**
 * Raw HTTP/1.1 clients that send a request head and only part of its body, and a
 * harness served by a real guarded listener for them to meet.
 *
 * @module
 */
import type { Config } from "../../config.ts";
import { testConfig } from "./config.ts";
import { serveGuarded } from "../../listener.ts";
import { startHarness } from "./harness.ts";

const encoder = new TextEncoder();

/**
 * Opens a connection and sends a request head declaring `length` bytes of body (JSON
 * unless `contentType` says otherwise; null: no type), plus `start` of it.
 */
export async function startSlowPost(
  port: number,
  path: string,
  options: {
    length: number;
    start?: string;
    forwardedFor?: string;
    method?: string;
    contentType?: string | null;
    headers?: Record<string, string>;
  },
) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const headers: Record<string, string> = { host: "x", ...options.headers };
  const type = options.contentType === undefined ? "application/json" : options.contentType;
  if (type !== null) headers["content-type"] = type;
  if (options.forwardedFor) headers["x-forwarded-for"] = options.forwardedFor;
  headers["content-length"] = String(options.length);
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("");
  await conn.write(encoder.encode(
    `${options.method ?? "POST"} ${path} HTTP/1.1\r\n${head}\r\n${options.start ?? "["}`,
  ));
  return conn;
}

/**
 * What the server sends until it closes the connection; throws when it is still open
 * after `withinMs` (30 s), so a server that never closes fails the test.
 */
export async function readAll(conn: Deno.Conn, withinMs = 30_000): Promise<string> {
  let text = "";
  const buffer = new Uint8Array(4096);
  let late = false;
  const timer = setTimeout(() => {
    late = true;
    conn.close();
  }, withinMs);
  try {
    while (true) {
      const n = await conn.read(buffer);
      if (n === null) return text;
      text += new TextDecoder().decode(buffer.subarray(0, n));
    }
  } catch (error) {
    // A reset is the server closing with our bytes unread: closed all the same.
    if (!late && error instanceof Deno.errors.ConnectionReset) return text;
    throw new Error(`still open after ${withinMs} ms (${error}); got ${JSON.stringify(text)}`);
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

/**
 * A harness (no delivery unless `deliver`) with one form of one webhook destination,
 * served by a guarded listener on loopback with short keep-alive; `http` overrides
 * parts of Config["http"].
 */
export async function startGuardedHarness(
  overrides: { http?: Partial<Config["http"]> } & Partial<Omit<Config, "http">> = {},
  options: { maxConnections?: number; deliver?: boolean } = {},
) {
  const maxConnections = options.maxConnections ?? 1000;
  const base = testConfig();
  const h = await startHarness({ ...overrides, http: { ...base.http, ...overrides.http } }, {
    deliver: options.deliver ?? false,
  });
  const form = await h.createForm();
  const destinationId = await h.addDestination(form.id, {
    type: "webhook",
    config: { url: "https://hooks.example.com/in" },
  });
  const server = serveGuarded({
    port: 0,
    hostname: "127.0.0.1",
    limits: { headersTimeoutMs: 5000, keepAliveTimeoutMs: 300, maxConnections },
    logger: h.service.logger,
  }, h.service.app.fetch);
  return {
    h,
    form,
    destinationId,
    server,
    port: server.addr.port,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await h.close();
    },
  };
}
