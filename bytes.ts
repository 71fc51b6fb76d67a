/** The chunks joined into one array. */
export function concatBytes(chunks: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}

/** A strict UTF-8 decoder (invalid bytes throw), shared: decode() keeps no state between calls. */
export const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
