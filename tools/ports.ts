/** A free TCP port on 127.0.0.1: listened on and closed again, so nothing listens on it. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr;
  listener.close();
  return port;
}
