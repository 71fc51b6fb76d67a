import assert from "node:assert/strict";
import { testCertificates } from "../tests/helpers/certs.ts";
import {
  deliveryFailure,
  deliveryRequest,
  ENVELOPE,
  httpDeps,
  loopbackGuard,
  type ReceivedRequest,
  startSink,
} from "../tests/helpers/connector_sink.ts";
import { createHttpTransport } from "./http_transport.ts";
import { createOutboundGuard } from "./outbound_guard.ts";
import {
  createSheetsWebhookConnector,
  MAX_REDIRECTS,
  type SheetsWebhookConfig,
  sheetsWebhookConfigSchema,
} from "./sheets_webhook.ts";
import { REDACTED } from "./types.ts";
import { VERSION } from "../version.ts";

const connector = createSheetsWebhookConnector(httpDeps(5_000));

function config(input: Record<string, unknown>): SheetsWebhookConfig {
  return sheetsWebhookConfigSchema.parse(input);
}

/** A script web app: /exec answers 302 to /echo, which answers JSON. */
function scriptWebApp(request: ReceivedRequest): Response {
  if (request.url.pathname === "/exec") {
    return new Response("<html>Moved</html>", {
      status: 302,
      headers: { location: "/echo?user_content_key=k1&lib=x" },
    });
  }
  if (request.url.pathname === "/echo" && request.method === "GET") {
    return Response.json({ ok: true });
  }
  return new Response("Method not allowed", { status: 405 });
}

function summary(request: ReceivedRequest) {
  return {
    method: request.method,
    path: `${request.url.pathname}${request.url.search}`,
    authorization: request.headers.get("authorization"),
    contentType: request.headers.get("content-type"),
    body: request.body,
  };
}

Deno.test("sheets_webhook POSTs the envelope, then GETs the 302 Location", async () => {
  await using sink = startSink(scriptWebApp);
  const receipt = await connector.deliver(deliveryRequest(config({
    url: `${sink.origin}/exec?token=abc`,
    authHeader: "Bearer sheet-token",
  })));

  assert.deepEqual(receipt, { statusCode: 200 });
  assert.deepEqual(sink.requests.map(summary), [
    {
      method: "POST",
      path: "/exec?token=abc",
      authorization: "Bearer sheet-token",
      contentType: "application/json",
      body: JSON.stringify(ENVELOPE),
    },
    {
      method: "GET",
      path: "/echo?user_content_key=k1&lib=x",
      authorization: "Bearer sheet-token",
      contentType: null,
      body: "",
    },
  ]);
  assert.equal(sink.requests[0].headers.get("user-agent"), `formrelay/${VERSION}`);
  assert.deepEqual(JSON.parse(sink.requests[0].body), ENVELOPE);
});

Deno.test("sheets_webhook sends no Authorization without authHeader", async () => {
  await using sink = startSink(() => Response.json({ ok: true }));
  await connector.deliver(deliveryRequest(config({ url: `${sink.origin}/exec` })));
  assert.equal(sink.requests.length, 1);
  assert.equal(sink.requests[0].headers.get("authorization"), null);
});

Deno.test("sheets_webhook drops Authorization on a redirect to another origin", async () => {
  await using target = startSink(() => Response.json({ ok: true }));
  await using sink = startSink(() =>
    new Response(null, { status: 302, headers: { location: `${target.origin}/echo` } })
  );
  await connector.deliver(deliveryRequest(config({
    url: `${sink.origin}/exec`,
    authHeader: "Bearer sheet-token",
  })));
  assert.equal(sink.requests[0].headers.get("authorization"), "Bearer sheet-token");
  assert.deepEqual(target.requests.map(summary), [
    { method: "GET", path: "/echo", authorization: null, contentType: null, body: "" },
  ]);
});

Deno.test("sheets_webhook sends config.method PUT", async () => {
  await using sink = startSink(() => new Response(null, { status: 201 }));
  const receipt = await connector.deliver(
    deliveryRequest(config({ url: `${sink.origin}/exec`, method: "PUT" })),
  );
  assert.deepEqual(receipt, { statusCode: 201 });
  assert.equal(sink.requests[0].method, "PUT");
  assert.deepEqual(JSON.parse(sink.requests[0].body), ENVELOPE);
});

Deno.test("sheets_webhook turns 301, 302 and 303 into GET without a body", async (t) => {
  await using sink = startSink((request) =>
    request.url.pathname === "/done" ? new Response("ok") : new Response(null, {
      status: Number(request.url.pathname.slice(1)),
      headers: { location: "/done" },
    })
  );
  for (const [status, method] of [[301, "POST"], [302, "PUT"], [303, "PUT"]] as const) {
    await t.step(`${status} after ${method}`, async () => {
      const count = sink.requests.length;
      await connector.deliver(deliveryRequest(config({ url: `${sink.origin}/${status}`, method })));
      const [first, second] = sink.requests.slice(count).map(summary);
      assert.equal(first.method, method);
      assert.deepEqual(second, {
        method: "GET",
        path: "/done",
        authorization: null,
        contentType: null,
        body: "",
      });
    });
  }
});

Deno.test("sheets_webhook keeps method and body on 307 and 308", async (t) => {
  await using sink = startSink((request) =>
    request.url.pathname === "/done" ? new Response("ok") : new Response(null, {
      status: Number(request.url.pathname.slice(1)),
      headers: { location: "/done" },
    })
  );
  for (const [status, method] of [[307, "POST"], [308, "PUT"]] as const) {
    await t.step(`${status} after ${method}`, async () => {
      const count = sink.requests.length;
      await connector.deliver(deliveryRequest(config({
        url: `${sink.origin}/${status}`,
        method,
        authHeader: "Bearer x",
      })));
      const [first, second] = sink.requests.slice(count).map(summary);
      assert.deepEqual(second, { ...first, path: "/done" });
      assert.equal(second.method, method);
      assert.equal(second.body, JSON.stringify(ENVELOPE));
      assert.equal(second.authorization, "Bearer x");
    });
  }
});

Deno.test(`sheets_webhook follows ${MAX_REDIRECTS} redirects and fails permanently on more`, async (t) => {
  await using sink = startSink((request) => {
    const left = Number(request.url.searchParams.get("left"));
    if (left === 0) return new Response("ok");
    return new Response(null, { status: 302, headers: { location: `/hop?left=${left - 1}` } });
  });
  await t.step("exactly the limit succeeds", async () => {
    const count = sink.requests.length;
    await connector.deliver(
      deliveryRequest(config({ url: `${sink.origin}/hop?left=${MAX_REDIRECTS}` })),
    );
    assert.equal(sink.requests.length - count, MAX_REDIRECTS + 1);
  });
  await t.step("one more fails", async () => {
    const count = sink.requests.length;
    const error = await deliveryFailure(() =>
      connector.deliver(
        deliveryRequest(config({ url: `${sink.origin}/hop?left=${MAX_REDIRECTS + 1}` })),
      )
    );
    assert.equal(error.permanent, true);
    assert.equal(error.statusCode, 302);
    assert.match(error.message, /more than 5 redirects/);
    assert.equal(sink.requests.length - count, MAX_REDIRECTS + 1);
  });
});

Deno.test("sheets_webhook fails permanently on a redirect loop", async () => {
  await using sink = startSink(() =>
    new Response(null, { status: 302, headers: { location: "/exec" } })
  );
  const error = await deliveryFailure(() =>
    connector.deliver(deliveryRequest(config({ url: `${sink.origin}/exec` })))
  );
  assert.equal(error.permanent, true);
  assert.equal(sink.requests.length, MAX_REDIRECTS + 1);
});

Deno.test("sheets_webhook fails permanently on redirects it cannot follow", async (t) => {
  await using sink = startSink((request) => {
    const location = request.url.searchParams.get("location");
    return new Response(null, {
      status: Number(request.url.searchParams.get("status") ?? 302),
      headers: location === null ? {} : { location },
    });
  });
  const cases: [string, RegExp][] = [
    ["?status=302", /no Location header/],
    ["?location=ftp://files.example/x", /"ftp:" URL/],
    ["?location=http://[::1&status=307", /invalid Location header/],
    ["?status=300&location=/x", /300/],
    ["?status=304&location=/x", /304/],
  ];
  for (const [query, message] of cases) {
    await t.step(query, async () => {
      const count = sink.requests.length;
      const error = await deliveryFailure(() =>
        connector.deliver(deliveryRequest(config({ url: `${sink.origin}/exec${query}` })))
      );
      assert.equal(error.permanent, true);
      assert.match(error.message, message);
      assert.equal(sink.requests.length, count + 1);
    });
  }
});

Deno.test("sheets_webhook classifies the final answer like the webhook", async (t) => {
  await using sink = startSink((request) => {
    if (request.url.pathname === "/exec") {
      return new Response(null, {
        status: 302,
        headers: { location: `/final?${request.url.searchParams}` },
      });
    }
    return new Response("no", {
      status: Number(request.url.searchParams.get("status")),
      headers: { "retry-after": "7" },
    });
  });
  const cases: [number, boolean, number | undefined][] = [
    [400, true, undefined],
    [404, true, undefined],
    [405, true, undefined],
    [408, false, 7000],
    [429, false, 7000],
    [500, false, 7000],
    [503, false, 7000],
  ];
  for (const [status, permanent, retryAfterMs] of cases) {
    await t.step(`${status}`, async () => {
      const error = await deliveryFailure(() =>
        connector.deliver(
          deliveryRequest(config({ url: `${sink.origin}/exec?status=${status}&token=s3cret` })),
        )
      );
      assert.equal(error.permanent, permanent);
      assert.equal(error.statusCode, status);
      assert.equal(error.retryAfterMs, retryAfterMs);
      assert.ok(error.message.startsWith(`Cannot deliver to "${sink.origin}": ${status} `));
      assert.doesNotMatch(error.message, /s3cret/);
    });
  }
});

Deno.test("sheets_webhook times out across redirects, as a transient failure", async () => {
  await using sink = startSink(async (request, self) => {
    if (request.url.pathname === "/exec") {
      return new Response(null, { status: 302, headers: { location: "/echo" } });
    }
    await self.released;
    return new Response("too late");
  });
  const quick = createSheetsWebhookConnector(httpDeps(200));
  const error = await deliveryFailure(() =>
    quick.deliver(deliveryRequest(config({ url: `${sink.origin}/exec` })))
  );
  assert.equal(error.permanent, false);
  assert.equal(error.message, `Cannot deliver to "${sink.origin}": no answer within 200 ms`);
  assert.equal(sink.requests.length, 2);
});

Deno.test("sheets_webhook checks every hop with the real address guard", async (t) => {
  await using sink = startSink((request) =>
    new Response(null, {
      status: 302,
      headers: { location: request.url.searchParams.get("to") ?? "/exec" },
    })
  );
  await t.step("a private first hop is refused before any request", async () => {
    const guarded = createSheetsWebhookConnector(
      httpDeps(5_000, createOutboundGuard({ allowPrivate: false })),
    );
    const error = await deliveryFailure(() =>
      guarded.deliver(deliveryRequest(config({ url: `${sink.origin}/exec` })))
    );
    assert.equal(error.permanent, true);
    assert.match(error.message, /"127\.0\.0\.1" is a loopback address/);
    assert.equal(sink.requests.length, 0);
  });

  const targets: [string, RegExp][] = [
    ["http://169.254.169.254/latest/meta-data/", /"169\.254\.169\.254" is a link-local address/],
    [`${sink.origin}/again`, /"127\.0\.0\.1" is a loopback address/],
    ["http://[::ffff:a9fe:a9fe]/", /link-local address \(IPv4-mapped 169\.254\.169\.254\)/],
    ["http://localhost/", /"localhost" is a loopback address/],
  ];
  const strict = createOutboundGuard({ allowPrivate: false });
  for (const [target, message] of targets) {
    await t.step(`a redirect to ${target} is refused`, async () => {
      const checked: string[] = [];
      // The sink itself is on loopback: only its first hop is let through. The short
      // time-out bounds a regression that would try to reach the target.
      const firstHopAllowed = createSheetsWebhookConnector(httpDeps(1_000, {
        allowAll: false,
        approve(hostname) {
          checked.push(hostname);
          if (checked.length === 1) return Promise.resolve([hostname]);
          return strict.approve(hostname);
        },
      }));
      const count = sink.requests.length;
      const url = `${sink.origin}/exec?to=${encodeURIComponent(target)}`;
      const error = await deliveryFailure(() =>
        firstHopAllowed.deliver(deliveryRequest(config({ url })))
      );
      assert.equal(error.permanent, true);
      assert.match(error.message, message);
      assert.equal(checked.length, 2);
      assert.equal(sink.requests.length, count + 1);
    });
  }
});

Deno.test("sheets_webhook never follows a redirect from https to http", async (t) => {
  const certs = await testCertificates();
  await using plain = startSink(() => Response.json({ ok: true }));
  const controller = new AbortController();
  const secure = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    signal: controller.signal,
    cert: certs.cert,
    key: certs.key,
    onListen() {},
  }, async (request) => {
    await request.body?.cancel();
    const url = new URL(request.url);
    if (url.pathname === "/exec") {
      const to = url.searchParams.get("to")!;
      return new Response(null, {
        status: Number(url.searchParams.get("status")),
        headers: { location: to },
      });
    }
    return Response.json({ ok: true });
  });
  try {
    // localhost stands in for a public host: the pinned path, with the test CA trusted.
    const secureConnector = createSheetsWebhookConnector({
      timeoutMs: 5_000,
      transport: createHttpTransport(loopbackGuard().guard, { caCerts: [certs.ca] }),
    });
    const origin = `https://localhost:${secure.addr.port}`;
    for (const status of [302, 307, 308]) {
      await t.step(`${status} to http is refused, nothing sent there`, async () => {
        const to = `http://localhost:${new URL(plain.origin).port}/echo`;
        const url = `${origin}/exec?status=${status}&to=${encodeURIComponent(to)}`;
        const error = await deliveryFailure(() =>
          secureConnector.deliver(deliveryRequest(config({ url, authHeader: "Bearer s3cret" })))
        );
        assert.equal(error.permanent, true);
        assert.equal(
          error.message,
          `Cannot deliver to "${origin}": ${status} ${
            status === 302 ? "Found" : status === 307 ? "Temporary Redirect" : "Permanent Redirect"
          } (redirect from https to http)`,
        );
        assert.equal(plain.requests.length, 0);
      });
    }
    await t.step("a redirect from https to https is followed", async () => {
      const url = `${origin}/exec?status=307&to=${encodeURIComponent(`${origin}/echo`)}`;
      const receipt = await secureConnector.deliver(deliveryRequest(config({ url })));
      assert.deepEqual(receipt, { statusCode: 200 });
    });
  } finally {
    controller.abort();
    await secure.finished;
  }
});

Deno.test("sheets_webhook redact hides authHeader", () => {
  const original = config({ url: "https://script.example/exec", authHeader: "Bearer t" });
  assert.deepEqual(connector.redact(original), {
    url: "https://script.example/exec",
    method: "POST",
    authHeader: REDACTED,
  });
  assert.equal(original.authHeader, "Bearer t");
  const plain = config({ url: "https://script.example/exec" });
  assert.deepEqual(connector.redact(plain), { url: "https://script.example/exec", method: "POST" });
});
