import assert from "node:assert/strict";
import { loopbackGuard, startSink } from "../tests/helpers/connector_sink.ts";
import { createHttpTransport, MAX_KEPT_BYTES } from "./http_transport.ts";

function post(signal = new AbortController().signal) {
  return {
    method: "POST",
    headers: { "content-type": "text/plain" },
    body: "hi",
    signal,
  };
}

Deno.test("pinned transport hands out an answer's start, reuses a connection after a short answer, closes it after a long one", async () => {
  const big = "x".repeat(512 * 1024);
  await using sink = startSink((request) =>
    new Response(request.url.pathname === "/big" ? big : "ok", { headers: { "x-answer": "1" } })
  );
  const { guard, approved } = loopbackGuard();
  const transport = createHttpTransport(guard);
  const port = new URL(sink.origin).port;
  try {
    for (const path of ["/small", "/small", "/big", "/small"]) {
      const response = await transport.request(
        new URL(`http://pinned.test:${port}${path}`),
        post(),
      );
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("x-answer"), "1");
      // The body handed out is the answer's start, at most MAX_KEPT_BYTES of it.
      const text = await response.text();
      if (path === "/big") assert.equal(text, big.slice(0, MAX_KEPT_BYTES));
      else assert.equal(text, "ok");
    }
    assert.equal(sink.requests.length, 4);
    assert.equal(sink.requests[0].body, "hi");
    // The first connection served both small answers and the long one, which closed it.
    assert.equal(approved.length, 2, approved.join());
  } finally {
    transport.close();
  }
});

Deno.test("pinned transport rejects an answer a Response cannot hold", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const serving = (async () => {
    const conn = await listener.accept();
    await conn.read(new Uint8Array(4096));
    await conn.write(new TextEncoder().encode("HTTP/1.1 700 Odd\r\ncontent-length: 0\r\n\r\n"));
    conn.close();
  })();
  const transport = createHttpTransport(loopbackGuard().guard);
  try {
    await assert.rejects(
      transport.request(new URL(`http://pinned.test:${listener.addr.port}/`), post()),
      RangeError,
    );
  } finally {
    transport.close();
    await serving;
    listener.close();
  }
});

Deno.test("pinned transport gives up when its signal aborts", async () => {
  await using sink = startSink(async (_request, self) => {
    await self.released;
    return new Response("late");
  });
  const transport = createHttpTransport(loopbackGuard().guard);
  const controller = new AbortController();
  const port = new URL(sink.origin).port;
  try {
    const pending = transport.request(
      new URL(`http://pinned.test:${port}/`),
      post(controller.signal),
    );
    const reason = new DOMException("stop", "TimeoutError");
    setTimeout(() => controller.abort(reason), 50);
    await assert.rejects(pending, (error) => error === reason);
  } finally {
    transport.close();
  }
});

Deno.test("pinned transport cuts a receiver's 2 000-byte reason phrase to 200 characters", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const phrase = "Overloaded ".repeat(200).slice(0, 2000);
  const serving = (async () => {
    const conn = await listener.accept();
    await conn.read(new Uint8Array(4096));
    const head = `HTTP/1.1 503 ${phrase}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`;
    await conn.write(new TextEncoder().encode(head));
    conn.close();
  })();
  const transport = createHttpTransport(loopbackGuard().guard);
  try {
    const response = await transport.request(
      new URL(`http://pinned.test:${listener.addr.port}/`),
      post(),
    );
    assert.equal(response.status, 503);
    assert.equal(response.statusText, phrase.trim().slice(0, 200) + "...");
  } finally {
    transport.close();
    await serving;
    listener.close();
  }
});
