import assert from "node:assert/strict";
import { expectError } from "./helpers/assert.ts";
import { createOrg } from "../store/orgs.ts";
import { startHarness } from "./helpers/harness.ts";
import { SMTP_RELAY_CONFIG } from "./helpers/config.ts";

const WEBHOOK = { type: "webhook", config: { url: "https://hooks.example.com/in" } };
const SMTP_A = SMTP_RELAY_CONFIG;

Deno.test("admin routes answer 401 Missing x-tenant-key without the header", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const routes: [string, string][] = [
    ["POST", "/v1/admin/keys/rotate"],
    ["GET", "/v1/admin/forms"],
    ["POST", "/v1/admin/forms"],
    ["GET", `/v1/admin/forms/${form.id}`],
    ["PATCH", `/v1/admin/forms/${form.id}`],
    ["DELETE", `/v1/admin/forms/${form.id}`],
    ["GET", `/v1/admin/forms/${form.id}/destinations`],
    ["POST", `/v1/admin/forms/${form.id}/destinations`],
    ["PATCH", `/v1/admin/forms/${form.id}/destinations/x`],
    ["DELETE", `/v1/admin/forms/${form.id}/destinations/x`],
    ["GET", `/v1/admin/forms/${form.id}/deliveries`],
  ];
  for (const [method, path] of routes) {
    await expectError(await h.request(path, { method }), 401, "Missing x-tenant-key");
    const wrong = await h.request(path, { method, headers: { "x-tenant-key": "sk_unknown" } });
    await expectError(wrong, 401, "Invalid tenant key");
  }
});

Deno.test("POST /v1/admin/keys/rotate issues a new key and revokes the old one", async () => {
  await using h = await startHarness({}, { deliver: false });
  const response = await h.admin("POST", "/keys/rotate");
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.ok, true);
  assert.match(body.tenantKey, /^sk_[A-Za-z0-9_-]{43}$/);
  await expectError(await h.admin("GET", "/forms"), 401, "Invalid tenant key");
  await expectError(
    await h.admin("POST", "/keys/rotate"),
    401,
    "Invalid tenant key",
  );
  const fresh = await h.admin("GET", "/forms", undefined, { tenantKey: body.tenantKey });
  assert.equal(fresh.status, 200);
});

Deno.test("50 concurrent rotations with the same key leave exactly one working key", async () => {
  await using h = await startHarness({}, { deliver: false });
  const responses = await Promise.all(
    Array.from({ length: 50 }, () => h.admin("POST", "/keys/rotate")),
  );
  const bodies = await Promise.all(responses.map((r) => r.json()));
  const issued = bodies.filter((b) => b.ok).map((b) => b.tenantKey as string);
  assert.equal(issued.length, 1, "exactly one rotation succeeds");
  for (const [i, response] of responses.entries()) {
    if (!bodies[i].ok) {
      assert.equal(response.status, 401);
      assert.equal(bodies[i].error, "Invalid tenant key");
    }
  }
  assert.equal((await h.admin("GET", "/forms", undefined, { tenantKey: issued[0] })).status, 200);
  await expectError(await h.admin("GET", "/forms"), 401, "Invalid tenant key");
  // Exactly one active key remains in the store.
  let active = 0;
  for await (const entry of h.service.db.kv.list({ prefix: ["tenant_keys_by_org", h.orgId] })) {
    if (entry) active++;
  }
  assert.equal(active, 1);
});

Deno.test("tenant keys are stored only as SHA-256 hashes", async () => {
  await using h = await startHarness({}, { deliver: false });
  for await (const entry of h.service.db.kv.list({ prefix: [] })) {
    assert.ok(
      !JSON.stringify(entry, (_, v) => typeof v === "bigint" ? String(v) : v).includes(h.tenantKey),
    );
  }
  const hash = new Uint8Array(
    await crypto.subtle.digest("SHA-256", new TextEncoder().encode(h.tenantKey)),
  ).toHex();
  const record = await h.service.db.kv.get(["tenant_keys", hash]);
  assert.deepEqual(record.value && (record.value as { revokedAt: unknown }).revokedAt, null);
});

Deno.test("forms CRUD", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  let formId = "";
  await t.step("POST /v1/admin/forms creates a form with defaults and a pk_ key", async () => {
    const response = await h.admin("POST", "/forms", {
      name: "Contact",
      allowedOrigins: ["https://Example.com/contact/"],
    });
    assert.equal(response.status, 200);
    const { ok, form } = await response.json();
    assert.equal(ok, true);
    assert.match(form.id, /^[0-9a-f-]{36}$/);
    assert.match(form.publicKey, /^pk_[A-Za-z0-9_-]{43}$/);
    assert.deepEqual(form.allowedOrigins, ["https://example.com"]);
    assert.equal(form.verifyCaptcha, false);
    assert.equal(form.enabled, true);
    assert.equal(form.hasCaptchaSecret, false);
    assert.ok(!("captchaSecret" in form));
    formId = form.id;
  });
  await t.step("GET /v1/admin/forms lists it, GET /forms/:id reads it", async () => {
    const list = await (await h.admin("GET", "/forms")).json();
    assert.deepEqual(list.forms.map((f: { id: string }) => f.id), [formId]);
    const one = await (await h.admin("GET", `/forms/${formId}`)).json();
    assert.equal(one.form.name, "Contact");
  });
  await t.step("PATCH sets the captcha secret write-only and keeps other fields", async () => {
    const response = await h.admin("PATCH", `/forms/${formId}`, {
      verifyCaptcha: true,
      captchaSecret: "0x0000000000000000000000000000000000000000",
    });
    assert.equal(response.status, 200);
    const { form } = await response.json();
    assert.equal(form.verifyCaptcha, true);
    assert.equal(form.hasCaptchaSecret, true);
    assert.equal(form.name, "Contact");
    assert.ok(!JSON.stringify(form).includes("0x0000"));
  });
  await t.step("verifyCaptcha without a secret is a validation error", async () => {
    const body = await expectError(
      await h.admin("POST", "/forms", { name: "X", verifyCaptcha: true }),
      400,
      "Validation error",
    );
    assert.deepEqual(body.issues.map((i: { path: string }) => i.path), ["captchaSecret"]);
  });
  await t.step("DELETE removes the form and its destinations", async () => {
    await h.addDestination(formId, WEBHOOK);
    assert.equal((await h.admin("DELETE", `/forms/${formId}`)).status, 200);
    await expectError(await h.admin("GET", `/forms/${formId}`), 404, "Form not found");
    const left = [];
    for await (const e of h.service.db.kv.list({ prefix: ["destinations", formId] })) left.push(e);
    assert.equal(left.length, 0);
    await expectError(await h.admin("DELETE", `/forms/${formId}`), 404, "Form not found");
  });
  await t.step("bad form bodies are validation errors with paths", async () => {
    const body = await expectError(
      await h.admin("POST", "/forms", { name: "", allowedOrigins: ["not a url"], extra: 1 }),
      400,
      "Validation error",
    );
    const paths = body.issues.map((i: { path: string }) => i.path).sort();
    assert.deepEqual(paths, ["", "allowedOrigins.0", "name"]);
  });
});

Deno.test("destinations: add answers the stored config with defaults", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const add = (body: unknown) => h.admin("POST", `/forms/${form.id}/destinations`, body);
  await t.step("webhook defaults: POST, {} headers, enabled", async () => {
    const response = await add(WEBHOOK);
    assert.equal(response.status, 200);
    const { ok, destination } = await response.json();
    assert.equal(ok, true);
    assert.deepEqual(Object.keys(destination).sort(), [
      "config",
      "formId",
      "id",
      "isEnabled",
      "type",
    ]);
    assert.equal(destination.formId, form.id);
    assert.deepEqual(destination.config, { url: WEBHOOK.config.url, method: "POST", headers: {} });
    assert.equal(destination.isEnabled, true);
  });
  await t.step("sheets_webhook defaults to POST and keeps authHeader", async () => {
    const { destination } = await (await add({
      type: "sheets_webhook",
      config: { url: "https://script.google.com/macros/s/x/exec", authHeader: "Bearer t" },
      isEnabled: false,
    })).json();
    assert.deepEqual(destination.config, {
      url: "https://script.google.com/macros/s/x/exec",
      method: "POST",
      authHeader: "Bearer t",
    });
    assert.equal(destination.isEnabled, false);
  });
  await t.step("smtp Variant A defaults to starttls and its own subject", async () => {
    const { destination } = await (await add({ type: "smtp", config: SMTP_A })).json();
    assert.equal(destination.config.secureTransport, "starttls");
    assert.equal(destination.config.subjectTemplate, "New submission: {{formName}}");
    assert.equal(destination.config.password, SMTP_A.password);
  });
  await t.step("smtp Variant B is refused when the platform relay is not configured", async () => {
    const body = await expectError(
      await add({ type: "smtp", config: { to: ["a@example.com"] } }),
      400,
      "Validation error",
    );
    assert.equal(body.issues[0].path, "config");
    assert.match(
      body.issues[0].message,
      /^This deployment has no platform mail relay, so give your own server's host/,
    );
  });
  await t.step("list and PATCH answers redact secrets", async () => {
    await add({
      type: "webhook",
      config: {
        ...WEBHOOK.config,
        headers: { "X-Token": "abc" },
        secret: "whsec_" + new Uint8Array(24).fill(7).toBase64(),
      },
    });
    const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    assert.equal(destinations.length, 4);
    const text = JSON.stringify(destinations);
    assert.ok(!text.includes(SMTP_A.password));
    assert.ok(!text.includes("Bearer t"));
    assert.ok(!text.includes('"abc"'));
    assert.ok(!text.includes("whsec_"));
    assert.ok(text.includes("********"));
  });
});

Deno.test("smtp Variant B is accepted with its own default subject when the platform relay is configured", async () => {
  await using h = await startHarness({
    platformSmtp: {
      host: "smtp.example.com",
      port: 587,
      secureTransport: "starttls",
      username: "u",
      password: "p",
      fromEmail: "forms@example.com",
    },
  }, { deliver: false });
  const form = await h.createForm();
  const response = await h.admin("POST", `/forms/${form.id}/destinations`, {
    type: "smtp",
    config: { to: ["a@example.com"] },
  });
  assert.equal(response.status, 200);
  const { destination } = await response.json();
  assert.deepEqual(destination.config, {
    to: ["a@example.com"],
    subjectTemplate: "Form submission: {{formName}}",
  });
});

Deno.test("destination validation rejects every out-of-range config field with its path", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const cases: [unknown, string][] = [
    [{ type: "smtp", config: { ...SMTP_A, port: 0 } }, "config.port"],
    [{ type: "smtp", config: { ...SMTP_A, port: 65536 } }, "config.port"],
    [{ type: "smtp", config: { ...SMTP_A, port: 25.5 } }, "config.port"],
    [{ type: "smtp", config: { ...SMTP_A, to: [] } }, "config.to"],
    [{ type: "smtp", config: { ...SMTP_A, to: ["not-an-email"] } }, "config.to.0"],
    [{ type: "smtp", config: { ...SMTP_A, from: "nobody" } }, "config.from"],
    [{ type: "smtp", config: { ...SMTP_A, host: "" } }, "config.host"],
    [{ type: "smtp", config: { ...SMTP_A, username: "" } }, "config.username"],
    [{ type: "smtp", config: { ...SMTP_A, password: "" } }, "config.password"],
    [{ type: "smtp", config: { ...SMTP_A, subjectTemplate: "" } }, "config.subjectTemplate"],
    [{ type: "smtp", config: { ...SMTP_A, secureTransport: "tls" } }, "config.secureTransport"],
    [{ type: "smtp", config: { ...SMTP_A, bcc: ["x@example.com"] } }, "config"],
    [{ type: "webhook", config: { url: "not a url" } }, "config.url"],
    [{ type: "webhook", config: { url: "ftp://example.com/x" } }, "config.url"],
    [{ type: "webhook", config: { url: "https://example.com", method: "GET" } }, "config.method"],
    [
      { type: "webhook", config: { url: "https://example.com", headers: { "X-A": 1 } } },
      "config.headers.X-A",
    ],
    [
      { type: "webhook", config: { url: "https://example.com", headers: { "X-A": "a\r\nB: c" } } },
      "config.headers.X-A",
    ],
    [
      { type: "webhook", config: { url: "https://example.com", secret: "whsec_short" } },
      "config.secret",
    ],
    [{ type: "webhook", config: { url: "https://example.com", extra: true } }, "config"],
    [
      { type: "sheets_webhook", config: { url: "https://example.com", method: "PATCH" } },
      "config.method",
    ],
    [{ type: "sheets_webhook", config: {} }, "config.url"],
    [{ type: "fax", config: {} }, "type"],
    [{ type: "webhook" }, "config"],
    [{ type: "webhook", config: WEBHOOK.config, isEnabled: "yes" }, "isEnabled"],
    [{ type: "webhook", config: WEBHOOK.config, color: "red" }, ""],
  ];
  for (const [body, path] of cases) {
    const response = await h.admin("POST", `/forms/${form.id}/destinations`, body);
    const answer = await expectError(response, 400, "Validation error");
    const paths = answer.issues.map((i: { path: string }) => i.path);
    assert.ok(paths.includes(path), `${JSON.stringify(body)} → ${JSON.stringify(answer.issues)}`);
    for (const issue of answer.issues) assert.equal(typeof issue.message, "string");
  }
  const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
  assert.equal(destinations.length, 0, "nothing invalid was stored");
});

Deno.test("PATCH and DELETE of destinations", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const id = await h.addDestination(form.id, WEBHOOK);
  await t.step("PATCH isEnabled", async () => {
    const response = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
      isEnabled: false,
    });
    assert.equal(response.status, 200);
    const { destination } = await response.json();
    assert.equal(destination.isEnabled, false);
    assert.equal(destination.config.url, WEBHOOK.config.url);
  });
  await t.step("PATCH config replaces it whole and re-validates it", async () => {
    const bad = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
      config: { url: "https://example.com", method: "DELETE" },
    });
    await expectError(bad, 400, "Validation error");
    const response = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
      config: { url: "https://other.example.com/x", method: "PUT" },
    });
    const { destination } = await response.json();
    assert.deepEqual(destination.config, {
      url: "https://other.example.com/x",
      method: "PUT",
      headers: {},
    });
  });
  await t.step("unknown destination ids are 404 Destination not found", async () => {
    await expectError(
      await h.admin("PATCH", `/forms/${form.id}/destinations/nope`, { isEnabled: true }),
      404,
      "Destination not found",
    );
    await expectError(
      await h.admin("DELETE", `/forms/${form.id}/destinations/nope`),
      404,
      "Destination not found",
    );
  });
  await t.step("DELETE answers { ok: true } once", async () => {
    const response = await h.admin("DELETE", `/forms/${form.id}/destinations/${id}`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { ok: true });
    await expectError(
      await h.admin("DELETE", `/forms/${form.id}/destinations/${id}`),
      404,
      "Destination not found",
    );
  });
  await t.step("a destination of another form of the same org is not found", async () => {
    const other = await h.createForm({ name: "Other" });
    const otherDest = await h.addDestination(other.id, WEBHOOK);
    await expectError(
      await h.admin("DELETE", `/forms/${form.id}/destinations/${otherDest}`),
      404,
      "Destination not found",
    );
  });
});

Deno.test("an org can never see or touch another org's forms or destinations", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const destId = await h.addDestination(form.id, WEBHOOK);
  const other = await createOrg(h.service.db, "Other org");
  const as = { tenantKey: other.tenantKey };
  assert.deepEqual((await (await h.admin("GET", "/forms", undefined, as)).json()).forms, []);
  const attempts: [string, string, unknown?][] = [
    ["GET", `/forms/${form.id}`],
    ["PATCH", `/forms/${form.id}`, { name: "Mine now" }],
    ["DELETE", `/forms/${form.id}`],
    ["GET", `/forms/${form.id}/destinations`],
    ["POST", `/forms/${form.id}/destinations`, WEBHOOK],
    ["PATCH", `/forms/${form.id}/destinations/${destId}`, { isEnabled: false }],
    ["DELETE", `/forms/${form.id}/destinations/${destId}`],
    ["GET", `/forms/${form.id}/deliveries`],
  ];
  for (const [method, path, body] of attempts) {
    await expectError(await h.admin(method, path, body, as), 404, "Form not found");
  }
  const { form: still } = await (await h.admin("GET", `/forms/${form.id}`)).json();
  assert.equal(still.name, "Contact");
  const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
  assert.equal(destinations.length, 1);
  assert.equal(destinations[0].isEnabled, true);
});

Deno.test("admin requests with bad bodies get clear 4xx answers", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  const post = (body: BodyInit, type = "application/json") =>
    h.request("/v1/admin/forms", {
      method: "POST",
      headers: { "x-tenant-key": h.tenantKey, "content-type": type },
      body,
    });
  await t.step("malformed JSON → 400 Invalid JSON body", async () => {
    await expectError(await post('{"name": '), 400, "Invalid JSON body");
  });
  await t.step("wrong content type → 415", async () => {
    await expectError(
      await post("name=x", "application/x-www-form-urlencoded"),
      415,
      "Unsupported content type: use application/json",
    );
  });
  await t.step("a body over 64 KB → 413, with or without Content-Length", async () => {
    const big = JSON.stringify({ name: "x".repeat(70_000) });
    await expectError(await post(big), 413, "Payload too large (max 64KB)");
    const stream = new Blob([big]).stream();
    await expectError(await post(stream), 413, "Payload too large (max 64KB)");
  });
  await t.step("a JSON value that is not an object → 400 Validation error", async () => {
    await expectError(await post("[1,2]"), 400, "Validation error");
  });
  await t.step("unknown route → 404 Not found, wrong method → 405", async () => {
    await expectError(await h.admin("GET", "/nothing-here"), 404, "Not found");
    await expectError(await h.request("/nope"), 404, "Not found");
    await expectError(await h.admin("PUT", "/forms"), 405, "Method not allowed");
    await expectError(await h.admin("GET", "/keys/rotate"), 405, "Method not allowed");
  });
});

Deno.test("GET /healthz answers 200 { ok: true } when KV answers", async () => {
  await using h = await startHarness({}, { deliver: false });
  const response = await h.request("/healthz");
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), { ok: true });
});

Deno.test("end to end over a real server: create form, add destination, rotate key", async () => {
  await using h = await startHarness({}, { deliver: false });
  const controller = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen() {} },
    h.service.app.fetch,
  );
  try {
    const base = `http://127.0.0.1:${server.addr.port}/v1/admin`;
    const headers = { "x-tenant-key": h.tenantKey, "content-type": "application/json" };
    const created = await fetch(`${base}/forms`, {
      method: "POST",
      headers,
      body: JSON.stringify({ name: "Over the wire" }),
    });
    assert.equal(created.status, 200);
    const { form } = await created.json();
    const added = await fetch(`${base}/forms/${form.id}/destinations`, {
      method: "POST",
      headers,
      body: JSON.stringify(WEBHOOK),
    });
    assert.equal(added.status, 200);
    assert.equal((await added.json()).destination.type, "webhook");
    const rotated = await fetch(`${base}/keys/rotate`, { method: "POST", headers });
    assert.equal(rotated.status, 200);
    const { tenantKey } = await rotated.json();
    const old = await fetch(`${base}/forms`, { headers });
    assert.equal(old.status, 401);
    assert.equal((await old.json()).error, "Invalid tenant key");
    const fresh = await fetch(`${base}/forms`, { headers: { "x-tenant-key": tenantKey } });
    assert.equal((await fresh.json()).forms[0].name, "Over the wire");
  } finally {
    controller.abort();
    await server.finished;
  }
});

Deno.test("a URL's userinfo and query are shown only in the answer that stored them", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const url = "https://robot:hunter2@hooks.example.com/in?token=s3cret";
  const shown = "https://********:********@hooks.example.com/in?token=********";
  for (const type of ["webhook", "sheets_webhook"]) {
    const created = await h.admin("POST", `/forms/${form.id}/destinations`, {
      type,
      config: { url },
    });
    assert.equal(created.status, 200);
    const { destination } = await created.json();
    assert.equal(destination.config.url, url, "the create answer is the stored config");
    const patched = await h.admin("PATCH", `/forms/${form.id}/destinations/${destination.id}`, {
      isEnabled: false,
    });
    assert.equal(patched.status, 200);
    assert.equal((await patched.json()).destination.config.url, shown);
  }
  const listed = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
  assert.deepEqual(listed.destinations.map((d: { config: { url: string } }) => d.config.url), [
    shown,
    shown,
  ]);
  assert.ok(!JSON.stringify(listed).includes("hunter2"));
  assert.ok(!JSON.stringify(listed).includes("s3cret"));
});

Deno.test("destinations carry an optional name, set on create, changed and removed by PATCH", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const path = `/forms/${form.id}/destinations`;
  const created = await h.admin("POST", path, { ...WEBHOOK, name: "  Sales inbox " });
  assert.equal(created.status, 200);
  const { destination } = await created.json();
  assert.equal(destination.name, "Sales inbox");
  const unnamed = await (await h.admin("POST", path, WEBHOOK)).json();
  assert.equal("name" in unnamed.destination, false, "the spec's answer when none is given");
  await expectError(await h.admin("POST", path, { ...WEBHOOK, name: "" }), 400, "Validation error");
  const renamed = await h.admin("PATCH", `${path}/${destination.id}`, { name: "Support" });
  assert.equal((await renamed.json()).destination.name, "Support");
  const removed = await h.admin("PATCH", `${path}/${destination.id}`, { name: null });
  assert.equal((await removed.json()).destination.name, null);
  const { destinations } = await (await h.admin("GET", path)).json();
  assert.deepEqual(destinations.map((d: { name: string | null }) => d.name), [null, null]);
});
