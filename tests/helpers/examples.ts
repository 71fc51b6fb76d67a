/** The example pages of docs/examples/, served as a site of their own for browser tests. */

const EXAMPLES = new URL("../../docs/examples/", import.meta.url);

const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
};

/** Serves the files of docs/examples/ (only those, no subfolders) on a free loopback port. */
export async function serveExamples() {
  const files = new Map<string, Uint8Array<ArrayBuffer>>();
  for await (const entry of Deno.readDir(EXAMPLES)) {
    if (entry.isFile) {
      files.set(`/${entry.name}`, await Deno.readFile(new URL(entry.name, EXAMPLES)));
    }
  }
  const controller = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen() {} },
    (request) => {
      const path = new URL(request.url).pathname;
      const body = files.get(path);
      if (body === undefined) return new Response("Not found", { status: 404 });
      const type = CONTENT_TYPES[path.slice(path.lastIndexOf(".") + 1)] ?? "text/plain";
      return new Response(body, { headers: { "content-type": type } });
    },
  );
  const close = async () => {
    if (!controller.signal.aborted) controller.abort();
    await server.finished;
  };
  return { port: server.addr.port, close, [Symbol.asyncDispose]: close };
}
