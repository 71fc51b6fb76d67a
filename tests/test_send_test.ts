import assert from "node:assert/strict";
import { createOrg } from "../store/orgs.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { freePort } from "../tools/ports.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { startSmtpServer } from "./helpers/smtp_server.ts";

interface TestResult {
  delivered: boolean;
  statusCode: number | null;
  error: string | null;
  detail: string | null;
  ms: number;
}

const webhook = (url: string, extra: Record<string, unknown> = {}) => ({
  type: "webhook",
  config: { url, ...extra },
});

/** Sends a test and checks the 200 answer's shape; returns the result. */
async function testSend(h: Harness, formId: string, destId: string): Promise<TestResult> {
  const response = await h.admin("POST", `/forms/${formId}/destinations/${destId}/test`);
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  const body = await response.json();
  assert.equal(body.ok, true);
  const { result } = body;
  assert.deepEqual(Object.keys(result).sort(), [
    "delivered",
    "detail",
    "error",
    "ms",
    "statusCode",
  ]);
  assert.equal(typeof result.ms, "number");
  return result;
}

async function assertNothingStored(h: Harness) {
  for (const prefix of ["jobs", "envelopes", "deliveries"]) {
    assert.equal(await countKeys(h.service.db.kv, prefix), 0, `no "${prefix}" keys`);
  }
}

/** A port on loopback with nothing listening. */
const closedPort = freePort;

Deno.test("POST .../destinations/:destId/test delivers a sample envelope to a healthy webhook", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm({ name: "Newsletter signup" });
  const destId = await h.addDestination(form.id, webhook(sink.url));
  const before = Date.now();
  const result = await testSend(h, form.id, destId);
  assert.equal(result.delivered, true);
  assert.equal(result.statusCode, 200);
  assert.equal(result.error, null);
  assert.equal(result.detail, null);
  assert.ok(result.ms >= 0);
  assert.equal(sink.received.length, 1);
  const [received] = sink.received;
  const envelope = received.json!;
  assert.match(
    String(envelope.submissionId),
    /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
  );
  assert.equal(envelope.formId, form.id);
  assert.equal(envelope.formName, "Newsletter signup");
  assert.deepEqual(envelope.payload, {
    test: true,
    message: "This is a test submission from formrelay",
  });
  const metadata = envelope.metadata as Record<string, unknown>;
  assert.deepEqual({ ...metadata, submittedAt: null }, {
    origin: null,
    ip: null,
    userAgent: null,
    referer: null,
    submittedAt: null,
  });
  const submittedAt = Date.parse(String(metadata.submittedAt));
  assert.ok(submittedAt >= before - 1000 && submittedAt <= Date.now(), "submittedAt is now");
  assert.equal(received.headers.get("webhook-id"), `${envelope.submissionId}.${destId}`);
  await assertNothingStored(h);
});

Deno.test("POST .../test gives each test send a fresh submission id", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, webhook(sink.url));
  await testSend(h, form.id, destId);
  await testSend(h, form.id, destId);
  assert.equal(sink.received.length, 2);
  assert.notEqual(sink.received[0].json!.submissionId, sink.received[1].json!.submissionId);
});

Deno.test("POST .../test reports a webhook answering 500 as not delivered, without secrets", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink(() => new Response("down", { status: 500 }));
  const form = await h.createForm();
  const url = new URL(sink.url);
  url.username = "hookuser";
  url.password = "hookpass";
  url.search = "?token=querysecret";
  const destId = await h.addDestination(
    form.id,
    webhook(url.href, { headers: { Authorization: "Bearer headersecret" } }),
  );
  const response = await h.admin("POST", `/forms/${form.id}/destinations/${destId}/test`);
  assert.equal(response.status, 200);
  const text = await response.text();
  for (const secret of ["hookpass", "querysecret", "headersecret"]) {
    assert.ok(!text.includes(secret), `answer must not contain "${secret}": ${text}`);
  }
  const { result } = JSON.parse(text);
  assert.equal(result.delivered, false);
  assert.equal(result.statusCode, 500);
  assert.match(result.error, /^Cannot deliver to "http:\/\/127\.0\.0\.1:\d+": 500/);
  assert.equal(sink.hits, 1, "one attempt, no retries");
  await assertNothingStored(h);
});

Deno.test("POST .../test reports a closed port as not delivered", async () => {
  await using h = await startHarness();
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, webhook(`http://127.0.0.1:${closedPort()}/hook`));
  const result = await testSend(h, form.id, destId);
  assert.equal(result.delivered, false);
  assert.equal(result.statusCode, null);
  assert.match(result.error ?? "", /^Cannot deliver to "http:\/\/127\.0\.0\.1:\d+": /);
  await assertNothingStored(h);
});

Deno.test("POST .../test sends to a disabled destination, which stays disabled", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, { ...webhook(sink.url), isEnabled: false });
  const result = await testSend(h, form.id, destId);
  assert.equal(result.delivered, true);
  assert.equal(sink.received.length, 1);
  const list = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
  assert.equal(list.destinations[0].isEnabled, false);
  await assertNothingStored(h);
});

Deno.test("POST .../test reports an SMTP login failure with its code and no password", async () => {
  await using h = await startHarness();
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "right-pass" });
  try {
    const form = await h.createForm();
    const destId = await h.addDestination(form.id, {
      type: "smtp",
      config: {
        host: server.hostname,
        port: server.port,
        secureTransport: "off",
        username: "relay",
        password: "wrong-pass-7781",
        from: "forms@example.com",
        to: ["inbox@example.com"],
      },
    });
    const response = await h.admin("POST", `/forms/${form.id}/destinations/${destId}/test`);
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.ok(!text.includes("wrong-pass-7781"), text);
    const { result } = JSON.parse(text);
    assert.equal(result.delivered, false);
    assert.match(result.error, /535/);
    assert.equal(server.messages.length, 0);
    assert.equal(server.logins.failed, 1);
    await assertNothingStored(h);
  } finally {
    await server.close();
  }
});

Deno.test("POST .../test delivers by SMTP with the form name in the subject", async () => {
  await using h = await startHarness();
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "right-pass" });
  try {
    const form = await h.createForm({ name: "Quote request" });
    const destId = await h.addDestination(form.id, {
      type: "smtp",
      config: {
        host: server.hostname,
        port: server.port,
        secureTransport: "off",
        username: "relay",
        password: "right-pass",
        from: "forms@example.com",
        to: ["inbox@example.com"],
      },
    });
    const result = await testSend(h, form.id, destId);
    assert.equal(result.delivered, true, JSON.stringify(result));
    assert.equal(result.error, null);
    assert.equal(server.messages.length, 1);
    assert.match(server.messages[0].raw, /^Subject: New submission: Quote request\r$/m);
    assert.match(server.messages[0].raw, /This is a test submission from formrelay/);
    await assertNothingStored(h);
  } finally {
    await server.close();
  }
});

Deno.test("POST .../test answers 404 and 401 like the other destination routes", async (t) => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, webhook(sink.url));
  const other = await createOrg(h.service.db, "Other org");
  const path = `/forms/${form.id}/destinations/${destId}/test`;

  async function expectError(response: Response, status: number, error: string) {
    assert.equal(response.status, status);
    assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
    assert.deepEqual(await response.json(), { ok: false, error });
  }

  await t.step("unknown destination", async () => {
    await expectError(
      await h.admin("POST", `/forms/${form.id}/destinations/${crypto.randomUUID()}/test`),
      404,
      "Destination not found",
    );
  });
  await t.step("unknown form", async () => {
    await expectError(
      await h.admin("POST", `/forms/${crypto.randomUUID()}/destinations/${destId}/test`),
      404,
      "Form not found",
    );
  });
  await t.step("another organization's form", async () => {
    await expectError(
      await h.admin("POST", path, undefined, { tenantKey: other.tenantKey }),
      404,
      "Form not found",
    );
  });
  await t.step("a destination of another form of the same organization", async () => {
    const second = await h.createForm({ name: "Second" });
    await expectError(
      await h.admin("POST", `/forms/${second.id}/destinations/${destId}/test`),
      404,
      "Destination not found",
    );
  });
  await t.step("missing tenant key", async () => {
    await expectError(
      await h.request(`/v1/admin${path}`, { method: "POST" }),
      401,
      "Missing x-tenant-key",
    );
  });
  await t.step("invalid tenant key", async () => {
    await expectError(
      await h.admin("POST", path, undefined, { tenantKey: `sk_${"a".repeat(43)}` }),
      401,
      "Invalid tenant key",
    );
  });
  await t.step("wrong method", async () => {
    await expectError(await h.admin("GET", path), 405, "Method not allowed");
  });
  assert.equal(sink.hits, 0, "no refused request reached the destination");
});

Deno.test("POST .../test accepts no body or an empty JSON object, and refuses others", async (t) => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, webhook(sink.url));
  const path = `/forms/${form.id}/destinations/${destId}/test`;

  await t.step("an empty JSON object", async () => {
    const response = await h.admin("POST", path, {});
    assert.equal(response.status, 200);
    assert.equal((await response.json()).result.delivered, true);
  });
  await t.step("a JSON object with fields", async () => {
    const response = await h.admin("POST", path, { payload: { a: 1 } });
    assert.equal(response.status, 400);
    const body = await response.json();
    assert.equal(body.error, "Validation error");
  });
  await t.step("malformed JSON", async () => {
    const response = await h.request(`/v1/admin${path}`, {
      method: "POST",
      headers: { "x-tenant-key": h.tenantKey, "content-type": "application/json" },
      body: "{",
    });
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error, "Invalid JSON body");
  });
  await t.step("a text body", async () => {
    const response = await h.request(`/v1/admin${path}`, {
      method: "POST",
      headers: { "x-tenant-key": h.tenantKey, "content-type": "text/plain" },
      body: "hello",
    });
    assert.equal(response.status, 415);
  });
  assert.equal(sink.received.length, 1, "only the accepted request sent a test");
});
