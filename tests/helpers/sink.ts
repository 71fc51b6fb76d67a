/** A real webhook receiver on 127.0.0.1 that records what it receives. */

/** One delivery as received. */
export interface Received {
  method: string;
  path: string;
  headers: Headers;
  body: string;
  /** The parsed JSON body, when it is JSON. */
  json: Record<string, unknown> | null;
}

/** A running webhook sink; `await using` closes it. */
export interface WebhookSink extends AsyncDisposable {
  url: string;
  received: Received[];
  /** Requests that arrived, answered or not. */
  hits: number;
  close(): Promise<void>;
}

/** Answers a request; the default answers 200. */
export type SinkAnswer = (received: Received, hit: number) => Response | Promise<Response>;

/** Starts a sink on a free port (or a given one, to bring a receiver back after a stop). */
export function startWebhookSink(
  answer: SinkAnswer = () => new Response("ok"),
  options: { port?: number } = {},
): WebhookSink {
  const controller = new AbortController();
  const sink: WebhookSink = {
    url: "",
    received: [],
    hits: 0,
    async close() {
      if (controller.signal.aborted) return;
      controller.abort();
      await server.finished;
    },
    [Symbol.asyncDispose]() {
      return sink.close();
    },
  };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: options.port ?? 0, signal: controller.signal, onListen() {} },
    async (request) => {
      const body = await request.text();
      let json = null;
      try {
        json = JSON.parse(body);
      } catch { /* not JSON */ }
      const received = {
        method: request.method,
        path: new URL(request.url).pathname,
        headers: request.headers,
        body,
        json,
      };
      const hit = ++sink.hits;
      const response = await answer(received, hit);
      if (response.ok) sink.received.push(received);
      return response;
    },
  );
  sink.url = `http://127.0.0.1:${server.addr.port}/hook`;
  return sink;
}
