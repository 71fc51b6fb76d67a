import assert from "node:assert/strict";
import { testConfig } from "./helpers/config.ts";
import { recordHealth } from "../store/destination_health.ts";
import { createOrg } from "../store/orgs.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { freePort } from "../tools/ports.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { startSmtpServer } from "./helpers/smtp_server.ts";
import { waitFor } from "./helpers/wait.ts";

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
  for (const type of ["application/json", "application/json; charset=utf-8", "text/plain"]) {
    await t.step(`an empty body with Content-Type ${type}`, async () => {
      const response = await h.request(`/v1/admin${path}`, {
        method: "POST",
        headers: { "x-tenant-key": h.tenantKey, "content-type": type },
        body: "",
      });
      assert.equal(response.status, 200);
      assert.equal((await response.json()).result.delivered, true);
    });
  }
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
  assert.equal(sink.received.length, 4, "only the accepted requests sent a test");
});

/** A test send's answer status, with the 429's Retry-After and body checked. */
async function testSendStatus(h: Harness, formId: string, destId: string) {
  const response = await h.admin("POST", `/forms/${formId}/destinations/${destId}/test`);
  const body = await response.json();
  if (response.status === 429) {
    const retryAfter = Number(response.headers.get("retry-after"));
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `Retry-After ${retryAfter}`);
    assert.equal(body.retryAfter, retryAfter);
    return { status: 429, error: body.error as string, detail: body.detail as string | undefined };
  }
  return { status: response.status, error: null, detail: undefined };
}

Deno.test("100 test sends in a burst reach the receiver a few times (TEST_SENDS_PER_DESTINATION), the rest 429 with Retry-After", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, webhook(sink.url));
  const started = Date.now();
  const statuses: number[] = [];
  for (let i = 0; i < 100; i++) {
    const answer = await testSendStatus(h, form.id, destId);
    if (answer.status === 429) assert.equal(answer.error, "Too many test sends: try again later");
    statuses.push(answer.status);
  }
  const perDestination = h.config.testSendLimits.perDestination;
  // A minute's budget at once, then one more for each tenth of a minute the burst took.
  const allowed = perDestination + Math.ceil((Date.now() - started) / (60_000 / perDestination));
  assert.ok(sink.hits >= perDestination, `at least the budget got through: ${sink.hits}`);
  assert.ok(sink.hits <= Math.min(30, allowed), `${sink.hits} reached the receiver`);
  assert.equal(statuses.filter((s) => s === 200).length, sink.hits);
  assert.equal(statuses.filter((s) => s === 429).length, 100 - sink.hits);
});

Deno.test("test sends are limited per organization across destinations, paused and disabled ones counted too", async () => {
  await using h = await startHarness({ testSendLimits: { perDestination: 100, perOrg: 4 } });
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const paused = await h.addDestination(form.id, webhook(sink.url));
  const disabled = await h.addDestination(form.id, webhook(sink.url));
  const healthy = await h.addDestination(form.id, webhook(sink.url));
  assert.equal(
    (await h.admin("PATCH", `/forms/${form.id}/destinations/${disabled}`, {
      isEnabled: false,
    })).status,
    200,
  );
  const failing = { delivered: false as const, blame: "destination" as const, error: "down" };
  const t = Date.now();
  const job = { formId: form.id, destinationId: paused };
  await recordHealth(h.service.db, job, failing, { pauseAfterMs: 1, now: t });
  assert.equal(
    await recordHealth(h.service.db, job, failing, { pauseAfterMs: 1, now: t + 10 }),
    "paused",
  );

  const order = [paused, paused, disabled, disabled, healthy, healthy, paused, disabled];
  const statuses = [];
  for (const destId of order) statuses.push((await testSendStatus(h, form.id, destId)).status);
  assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429, 429, 429]);
  assert.equal(sink.hits, 4);
  // Delivered test sends change nothing: the paused one stays paused, the disabled disabled.
  const listed = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
  const byId = new Map(
    listed.destinations.map((d: { id: string }) => [d.id, d] as const),
  ) as Map<string, { health: { state: string }; isEnabled: boolean }>;
  assert.equal(byId.get(paused)?.health.state, "paused");
  assert.equal(byId.get(disabled)?.isEnabled, false);

  // Another organization has its own budget.
  const other = await createOrg(h.service.db, "Other org");
  const otherForm = await (await h.admin("POST", "/forms", { name: "Theirs" }, {
    tenantKey: other.tenantKey,
  })).json();
  const created = await (await h.admin(
    "POST",
    `/forms/${otherForm.form.id}/destinations`,
    webhook(sink.url),
    { tenantKey: other.tenantKey },
  )).json();
  const response = await h.admin(
    "POST",
    `/forms/${otherForm.form.id}/destinations/${created.destination.id}/test`,
    undefined,
    { tenantKey: other.tenantKey },
  );
  assert.equal(response.status, 200);
  await response.body?.cancel();
});

Deno.test("one test send at a time per destination: a second while the first is under way is 429", async () => {
  await using h = await startHarness();
  const { promise: release, resolve } = Promise.withResolvers<void>();
  let arrived = 0;
  await using sink = startWebhookSink(async () => {
    arrived++;
    await release;
    return new Response("ok");
  });
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, webhook(sink.url));
  const first = testSend(h, form.id, destId);
  await waitFor(() => arrived === 1, { message: "the first test send reached the receiver" });
  const second = await testSendStatus(h, form.id, destId);
  assert.equal(second.status, 429);
  assert.equal(second.error, "A test send to this destination is already under way");
  resolve();
  assert.equal((await first).delivered, true);
  assert.equal((await testSendStatus(h, form.id, destId)).status, 200, "free again");
  assert.equal(sink.hits, 2);
});

Deno.test("a test send past the organization's outbound budget for a host is 429 and never sent", async () => {
  const base = testConfig();
  await using h = await startHarness({
    outbound: { ...base.outbound, hostRequests: 2 },
  });
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const a = await h.addDestination(form.id, webhook(sink.url));
  const b = await h.addDestination(form.id, webhook(`${sink.url}/other-path`));
  assert.equal((await testSendStatus(h, form.id, a)).status, 200);
  assert.equal((await testSendStatus(h, form.id, b)).status, 200);
  const third = await testSendStatus(h, form.id, a);
  assert.equal(third.status, 429);
  assert.equal(third.error, "Outbound limit reached: try again later");
  assert.equal(
    third.detail,
    `the organization's request limit for "${new URL(sink.url).host}" is reached`,
  );
  assert.equal(sink.hits, 2);
});

Deno.test("POST .../test reads the same for a closed port and a port that does not speak HTTP", async () => {
  await using h = await startHarness();
  const ssh = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const serving = (async () => {
    for await (const conn of ssh) {
      await conn.write(new TextEncoder().encode("SSH-2.0-OpenSSH_9.6\r\n")).catch(() => {});
      conn.close();
    }
  })();
  try {
    const form = await h.createForm();
    const errors = [];
    for (const port of [closedPort(), ssh.addr.port]) {
      const destId = await h.addDestination(form.id, webhook(`http://127.0.0.1:${port}/hook`));
      const result = await testSend(h, form.id, destId);
      errors.push(result.error?.replace(/:\d+"/, ':PORT"'));
    }
    assert.deepEqual(
      errors,
      Array(2).fill('Cannot deliver to "http://127.0.0.1:PORT": no HTTP service answered'),
    );
  } finally {
    ssh.close();
    await serving.catch(() => {});
  }
});
