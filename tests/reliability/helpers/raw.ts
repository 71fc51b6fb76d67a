import { concatBytes } from "../../../bytes.ts";
/**
 * Raw HTTP/1.1 over TCP for requests `fetch` will not send: lying lengths, broken
 * framing, invalid bytes in headers, slow bodies.
 *
 * @module
 */

/** How a raw exchange is sent. */
export interface RawOptions {
  /** Pause between the parts (a slow body). */
  gapMs?: number;
  /** Half-close after the last part (the body ends before its declared length). */
  closeWrite?: boolean;
  /** Give up reading after this long (default 3 s). */
  waitMs?: number;
}

/**
 * Sends the parts over one connection and reads until the server closes or the wait
 * ends. Returns the status codes of every response seen (none when it just hung up).
 */
export async function rawExchange(
  port: number,
  parts: (string | Uint8Array)[],
  options: RawOptions = {},
): Promise<number[]> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    try {
      conn.close();
    } catch { /* already closed */ }
  };
  const timer = setTimeout(close, options.waitMs ?? 3000);
  const received: Uint8Array[] = [];
  try {
    const reading = (async () => {
      const buffer = new Uint8Array(16384);
      while (true) {
        const n = await conn.read(buffer).catch(() => null);
        if (n === null) break;
        received.push(buffer.slice(0, n));
      }
    })();
    try {
      for (const [i, part] of parts.entries()) {
        if (i > 0 && options.gapMs) await new Promise((r) => setTimeout(r, options.gapMs));
        const bytes = typeof part === "string" ? new TextEncoder().encode(part) : part;
        for (let offset = 0; offset < bytes.length;) {
          offset += await conn.write(bytes.subarray(offset));
        }
      }
      if (options.closeWrite) await conn.closeWrite();
    } catch { /* the server hung up early, which is allowed */ }
    await reading;
  } finally {
    clearTimeout(timer);
    close();
  }
  const text = new TextDecoder("latin1").decode(concatBytes(received));
  return [...text.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
}
