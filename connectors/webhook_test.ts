import assert from "node:assert/strict";
import {
  closedPort,
  deliveryFailure,
  deliveryRequest,
  ENVELOPE,
  httpDeps,
  startSink,
  withDeadline,
} from "../tests/helpers/connector_sink.ts";
import { createOutboundGuard } from "./outbound_guard.ts";
import { REDACTED } from "./types.ts";
import { createWebhookConnector, type WebhookConfig, webhookConfigSchema } from "./webhook.ts";
import { VERSION } from "../version.ts";

const connector = createWebhookConnector(httpDeps(5_000));

function config(input: Record<string, unknown>): WebhookConfig {
  return webhookConfigSchema.parse(input);
}

Deno.test("webhook POSTs the envelope as JSON with the configured headers", async () => {
  await using sink = startSink(() => new Response("ok"));
  const receipt = await connector.deliver(deliveryRequest(config({
    url: `${sink.origin}/hooks/in?token=abc`,
    headers: { "X-Custom": "yes", "Content-Type": "text/plain", Authorization: "Bearer t" },
  })));

  assert.deepEqual(receipt, { statusCode: 200 });
  assert.equal(sink.requests.length, 1);
  const [request] = sink.requests;
  assert.equal(request.method, "POST");
  assert.equal(request.url.pathname, "/hooks/in");
  assert.equal(request.url.search, "?token=abc");
  assert.equal(request.headers.get("content-type"), "application/json");
  assert.equal(request.headers.get("user-agent"), `formrelay/${VERSION}`);
  assert.equal(request.headers.get("x-custom"), "yes");
  assert.equal(request.headers.get("authorization"), "Bearer t");
  assert.deepEqual(JSON.parse(request.body), ENVELOPE);
  assert.equal(request.body, JSON.stringify(ENVELOPE));
});

Deno.test("webhook sends config.method PUT and PATCH", async (t) => {
  await using sink = startSink(() => new Response(null, { status: 204 }));
  for (const method of ["PUT", "PATCH"]) {
    await t.step(method, async () => {
      const receipt = await connector.deliver(
        deliveryRequest(config({ url: `${sink.origin}/x`, method })),
      );
      assert.deepEqual(receipt, { statusCode: 204 });
      const request = sink.requests.at(-1)!;
      assert.equal(request.method, method);
      assert.deepEqual(JSON.parse(request.body), ENVELOPE);
    });
  }
});

Deno.test("webhook-id is the deliveryId and the same on every attempt", async () => {
  await using sink = startSink(() => new Response("ok"));
  const hook = config({ url: `${sink.origin}/x` });
  await connector.deliver(deliveryRequest(hook, { deliveryId: "dlv_same" }));
  await connector.deliver(deliveryRequest(hook, { deliveryId: "dlv_same" }));
  await connector.deliver(deliveryRequest(hook, { deliveryId: "dlv_other" }));

  const ids = sink.requests.map((request) => request.headers.get("webhook-id"));
  assert.deepEqual(ids, ["dlv_same", "dlv_same", "dlv_other"]);
  for (const request of sink.requests) {
    assert.equal(request.headers.get("webhook-timestamp"), null);
    assert.equal(request.headers.get("webhook-signature"), null);
  }
});

Deno.test("webhook signs with Standard Webhooks headers when a secret is set", async () => {
  await using sink = startSink(() => new Response("ok"));
  const key = crypto.getRandomValues(new Uint8Array(32));
  const hook = config({ url: `${sink.origin}/x`, secret: `whsec_${key.toBase64()}` });
  const before = Math.floor(Date.now() / 1000);
  await connector.deliver(deliveryRequest(hook, { deliveryId: "msg_1" }));
  const after = Math.floor(Date.now() / 1000);

  const [request] = sink.requests;
  assert.equal(request.headers.get("webhook-id"), "msg_1");
  const timestamp = request.headers.get("webhook-timestamp")!;
  assert.match(timestamp, /^\d+$/);
  assert.ok(Number(timestamp) >= before && Number(timestamp) <= after);

  const hmacKey = await crypto.subtle.importKey(
    "raw",
    key,
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const signed = new TextEncoder().encode(`msg_1.${timestamp}.${request.body}`);
  const expected = new Uint8Array(await crypto.subtle.sign("HMAC", hmacKey, signed)).toBase64();
  assert.equal(request.headers.get("webhook-signature"), `v1,${expected}`);
});

Deno.test("webhook fails permanently on a redirect without following it", async (t) => {
  await using sink = startSink((request) =>
    request.url.pathname === "/moved"
      ? new Response(null, {
        status: Number(request.url.searchParams.get("status")),
        headers: { location: "/target" },
      })
      : new Response("ok")
  );
  for (const status of [301, 302, 303, 307, 308]) {
    await t.step(`${status}`, async () => {
      const count = sink.requests.length;
      const error = await deliveryFailure(() =>
        connector.deliver(deliveryRequest(config({ url: `${sink.origin}/moved?status=${status}` })))
      );
      assert.equal(error.permanent, true);
      assert.equal(error.statusCode, status);
      assert.match(error.message, /redirects are not followed/);
      assert.equal(sink.requests.length, count + 1);
    });
  }
});

Deno.test("webhook classifies answers: 4xx permanent, 408, 429 and 5xx transient", async (t) => {
  await using sink = startSink((request) =>
    new Response("nope", { status: Number(request.url.pathname.slice(1)) })
  );
  const cases: [number, boolean][] = [
    [400, true],
    [401, true],
    [404, true],
    [410, true],
    [422, true],
    [408, false],
    [429, false],
    [500, false],
    [502, false],
    [503, false],
  ];
  for (const [status, permanent] of cases) {
    await t.step(`${status} is ${permanent ? "permanent" : "transient"}`, async () => {
      const error = await deliveryFailure(() =>
        connector.deliver(deliveryRequest(config({ url: `${sink.origin}/${status}` })))
      );
      assert.equal(error.permanent, permanent);
      assert.equal(error.statusCode, status);
      assert.equal(error.retryAfterMs, undefined);
    });
  }
});

Deno.test("webhook error text names the URL's origin only: no path, query, userinfo or payload", async () => {
  await using sink = startSink(() => new Response("Ada", { status: 503 }));
  const url = new URL(`${sink.origin}/hook/path?token=s3cret`);
  url.username = "user";
  url.password = "hunter2";
  const error = await deliveryFailure(() =>
    connector.deliver(deliveryRequest(config({ url: url.href })))
  );
  assert.equal(
    error.message,
    `Cannot deliver to "${sink.origin}": 503 Service Unavailable`,
  );
  assert.doesNotMatch(error.message, /s3cret|hunter2|user|hook|path|Ada/);
});

Deno.test("webhook honours Retry-After on transient answers", async (t) => {
  await using sink = startSink((request) => {
    const [status, retryAfter] = request.url.searchParams.getAll("a");
    return new Response(null, { status: Number(status), headers: { "retry-after": retryAfter } });
  });
  await t.step("503 with Retry-After: 7 waits 7000 ms", async () => {
    const error = await deliveryFailure(() =>
      connector.deliver(deliveryRequest(config({ url: `${sink.origin}/?a=503&a=7` })))
    );
    assert.equal(error.permanent, false);
    assert.equal(error.statusCode, 503);
    assert.equal(error.retryAfterMs, 7000);
  });
  await t.step("429 with an HTTP-date", async () => {
    const date = new Date(Date.now() + 120_000).toUTCString();
    const error = await deliveryFailure(() =>
      connector.deliver(
        deliveryRequest(config({ url: `${sink.origin}/?a=429&a=${encodeURIComponent(date)}` })),
      )
    );
    assert.equal(error.permanent, false);
    assert.ok(error.retryAfterMs! > 100_000 && error.retryAfterMs! <= 120_000);
  });
  await t.step("400 ignores Retry-After", async () => {
    const error = await deliveryFailure(() =>
      connector.deliver(deliveryRequest(config({ url: `${sink.origin}/?a=400&a=7` })))
    );
    assert.equal(error.permanent, true);
    assert.equal(error.retryAfterMs, undefined);
  });
});

Deno.test("webhook cancels the answer body it does not read", async (t) => {
  for (const status of [200, 503]) {
    await t.step(`${status}`, async () => {
      const cancelled = Promise.withResolvers<void>();
      await using sink = startSink(() =>
        new Response(
          new ReadableStream({
            pull(controller) {
              controller.enqueue(new Uint8Array(16 * 1024));
            },
            cancel() {
              cancelled.resolve();
            },
          }),
          { status },
        )
      );
      await connector.deliver(deliveryRequest(config({ url: `${sink.origin}/x` }))).catch(
        () => {},
      );
      await withDeadline(cancelled.promise, 2_000, "the answer body to be cancelled");
    });
  }
});

Deno.test("webhook times out a sink that does not answer, as a transient failure", async () => {
  await using sink = startSink(async (_request, self) => {
    await self.released;
    return new Response("too late");
  });
  const quick = createWebhookConnector(httpDeps(200));
  const started = performance.now();
  const error = await deliveryFailure(() =>
    quick.deliver(deliveryRequest(config({ url: `${sink.origin}/slow?token=s3cret` })))
  );
  assert.equal(error.permanent, false);
  assert.equal(error.message, `Cannot deliver to "${sink.origin}": no answer within 200 ms`);
  assert.ok(performance.now() - started < 5_000);
  assert.equal(sink.requests.length, 1);
});

Deno.test("webhook stops when the caller's signal aborts, as a transient failure", async () => {
  const controller = new AbortController();
  await using sink = startSink(async (_request, self) => {
    controller.abort();
    await self.released;
    return new Response("too late");
  });
  const error = await deliveryFailure(() =>
    connector.deliver(
      deliveryRequest(config({ url: `${sink.origin}/x` }), { signal: controller.signal }),
    )
  );
  assert.equal(error.permanent, false);
  assert.match(error.message, /cancelled/);
});

Deno.test("webhook treats a refused connection as transient", async () => {
  const port = closedPort();
  const error = await deliveryFailure(() =>
    connector.deliver(deliveryRequest(config({ url: `http://127.0.0.1:${port}/x?token=s3cret` })))
  );
  assert.equal(error.permanent, false);
  assert.equal(error.statusCode, undefined);
  // Not "refused": a closed port reads like one that does not speak HTTP (no port scans).
  assert.equal(
    error.message,
    `Cannot deliver to "http://127.0.0.1:${port}": no HTTP service answered`,
  );
  assert.doesNotMatch(error.message, /s3cret/);
});

Deno.test("webhook refuses private destinations with the real address guard", async (t) => {
  await using sink = startSink(() => new Response("ok"));
  const guarded = createWebhookConnector(
    httpDeps(5_000, createOutboundGuard({ allowPrivate: false })),
  );
  const port = new URL(sink.origin).port;
  for (const host of ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "[::1]"]) {
    await t.step(host, async () => {
      const error = await deliveryFailure(() =>
        guarded.deliver(deliveryRequest(config({ url: `http://${host}:${port}/x` })))
      );
      assert.equal(error.permanent, true);
      assert.match(error.message, /^Destination address is not allowed: .* loopback address/);
    });
  }
  assert.equal(sink.requests.length, 0);

  const open = createWebhookConnector(httpDeps(5_000, createOutboundGuard({ allowPrivate: true })));
  await open.deliver(deliveryRequest(config({ url: `${sink.origin}/x` })));
  assert.equal(sink.requests.length, 1);
});

Deno.test("webhook redact hides header values and the secret", () => {
  const original = config({
    url: "https://hooks.example/in",
    headers: { Authorization: "Bearer t", "X-Id": "7" },
    secret: `whsec_${new Uint8Array(24).toBase64()}`,
  });
  const copy = structuredClone(original);
  assert.deepEqual(connector.redact(original), {
    url: "https://hooks.example/in",
    method: "POST",
    headers: { Authorization: REDACTED, "X-Id": REDACTED },
    secret: REDACTED,
  });
  assert.deepEqual(original, copy);
  const plain = config({ url: "https://hooks.example/in" });
  assert.deepEqual(connector.redact(plain), {
    url: "https://hooks.example/in",
    method: "POST",
    headers: {},
  });
});
