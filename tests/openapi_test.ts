/**
 * The OpenAPI description: valid OpenAPI 3.1 by a real validator, listing exactly the
 * routes the app serves, and describing the answers the app really gives.
 */
import { DESTINATION_TYPES } from "../connectors/registry.ts";
import assert from "node:assert/strict";
import { Validator } from "./deps.ts";
import { loadConfig } from "../config.ts";
import { ERRORS } from "../errors.ts";
import { servedRoutes } from "../app.ts";
import { answersOf, operations } from "../routes/openapi.ts";
import type { OperationSpec } from "../routes/operation_spec.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";

/**
 * Finds the operation of a request and checks the answer against the schema the document
 * gives its status; returns the operation and the answer's body.
 */
async function expectDescribed(
  specs: OperationSpec[],
  request: { method: string; path: string },
  response: Response,
) {
  const { method, path } = request;
  const spec = specs.find((op) =>
    op.method === method.toLowerCase() &&
    new RegExp(`^${op.path.replace(/\{\w+\}/g, "[^/]+")}$`).test(path.split("?")[0])
  );
  assert.ok(spec, `no operation for ${method} ${path}`);
  const body = await response.json();
  const schema = answersOf(spec)[response.status]?.schema;
  assert.ok(schema, `${method} ${path}: status ${response.status} is not described`);
  const result = schema.safeParse(body);
  assert.ok(
    result.success,
    `${method} ${path} ${response.status}: ${JSON.stringify(body)} ${result.error}`,
  );
  return { spec, body };
}

/** Hono's `/v1/admin/forms/:id` as OpenAPI's `/v1/admin/forms/{id}`. */
function openApiPath(honoPath: string): string {
  return honoPath.replace(/:(\w+)/g, "{$1}");
}

Deno.test("GET /v1/openapi.json is a valid OpenAPI 3.1 document listing every route of the app", async (t) => {
  await using h = await startHarness();
  const response = await h.request("/v1/openapi.json");
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  const document = await response.json();

  await t.step("a real validator accepts it as OpenAPI 3.1", async () => {
    assert.equal(document.openapi, "3.1.0");
    const result = await new Validator().validate(document);
    assert.equal(result.valid, true, JSON.stringify(result.errors, null, 1));
  });

  await t.step("every method and path the app serves is described, and nothing else", () => {
    const served = new Set<string>();
    for (const route of servedRoutes(h.service.app)) {
      // Middleware (`/*`) and the 405 catch-alls are not operations; their paths are.
      if (route.path.endsWith("*")) continue;
      const path = openApiPath(route.path);
      assert.ok(document.paths[path], `${route.path} is missing from the document`);
      if (route.method === "ALL") continue;
      const method = route.method.toLowerCase();
      assert.ok(document.paths[path][method], `${route.method} ${route.path} is missing`);
      served.add(`${method} ${path}`);
    }
    const documented = Object.entries(document.paths as Record<string, object>)
      .flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`));
    assert.deepEqual(documented.filter((op) => !served.has(op)), []);
  });

  await t.step("admin operations declare the tenant key and the 401 answers", () => {
    for (const [path, item] of Object.entries(document.paths as Record<string, object>)) {
      if (!path.startsWith("/v1/admin/")) continue;
      for (const operation of Object.values(item)) {
        assert.deepEqual(operation.security, [{ tenantKey: [] }], path);
        assert.match(operation.responses["401"].description, /Missing x-tenant-key/);
      }
    }
  });

  await t.step(
    "request bodies are the routes' own schemas (strict, with the connector configs)",
    () => {
      const create = document.paths["/v1/admin/forms/{id}/destinations"].post.requestBody
        .content["application/json"].schema;
      const types = create.oneOf.map((s: { properties: { type: { const: string } } }) =>
        s.properties.type.const
      );
      assert.deepEqual(types, [...DESTINATION_TYPES]);
      const webhook = create.oneOf[0].properties.config;
      assert.deepEqual(webhook.required, ["url"]);
      assert.deepEqual(webhook.properties.method.enum, ["POST", "PUT", "PATCH"]);
      const form = document.paths["/v1/admin/forms"].post.requestBody.content["application/json"]
        .schema;
      assert.deepEqual(form.required, ["name"]);
      assert.equal(form.additionalProperties, false);
      assert.ok("honeypotField" in form.properties && "redirectUrl" in form.properties);
    },
  );
});

Deno.test("the answers the app gives match the description", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const specs = operations(h.config.ingestContentTypes);
  const covered = new Set<string>();

  /** Checks the answer against its operation (see above) and counts the operation covered. */
  async function described(method: string, path: string, response: Response) {
    const { spec, body } = await expectDescribed(specs, { method, path }, response);
    covered.add(`${spec.method} ${spec.path}`);
    return body;
  }
  async function admin(method: string, path: string, body?: unknown, tenantKey?: string) {
    const response = await h.admin(method, path, body, { tenantKey });
    return described(method, `/v1/admin${path}`, response);
  }

  const { form } = await admin("POST", "/forms", { name: "Contact", honeypotField: "_gotcha" });
  await admin("GET", "/forms");
  await admin("GET", "/deployment");
  await admin("GET", `/forms/${form.id}`);
  await admin("PATCH", `/forms/${form.id}`, { allowedOrigins: ["https://example.com/"] });
  await admin("PATCH", `/forms/${form.id}`, {
    spamRules: { minSeconds: 2, blockedPatterns: ["casino"] },
    confirmation: { emailField: "email", subject: "Thanks", text: "We got it" },
  });
  await admin("PATCH", `/forms/${form.id}`, { spamRules: null, confirmation: null });
  const { destination } = await admin("POST", `/forms/${form.id}/destinations`, {
    type: "webhook",
    config: { url: sink.url, headers: { "x-a": "b" } },
  });
  await admin("POST", `/forms/${form.id}/destinations`, {
    type: "smtp",
    config: {
      host: "127.0.0.1",
      port: 2525,
      username: "u",
      password: "p",
      from: "a@example.com",
      to: ["b@example.com"],
    },
  });
  await admin("POST", `/forms/${form.id}/destinations`, {
    type: "webhook",
    config: { url: sink.url },
    conditions: [{ field: "topic", op: "equals", values: ["sales"] }],
  });
  await admin("POST", `/forms/${form.id}/destinations`, {
    type: "sheets_webhook",
    config: { url: sink.url, authHeader: "Bearer x" },
  });
  await admin("GET", `/forms/${form.id}/destinations`);
  await admin("PATCH", `/forms/${form.id}/destinations/${destination.id}`, { isEnabled: false });
  await admin("POST", `/forms/${form.id}/destinations/${destination.id}/test`);
  await admin("POST", `/forms/${form.id}/destinations/preview`, { type: "slack", config: {} });
  await admin("GET", `/forms/${form.id}/deliveries?limit=5`);
  await admin("GET", `/forms/${form.id}/refusals?days=3`);
  const dest = `/forms/${form.id}/destinations/${destination.id}`;
  const since = { since: new Date(0).toISOString() };
  await admin("POST", `${dest}/redeliver`, since); // 409: disabled
  await admin(
    "POST",
    `/forms/${form.id}/deliveries/${crypto.randomUUID()}.${destination.id}/redeliver`,
  );
  await admin(
    "POST",
    `/forms/${form.id}/deliveries/${crypto.randomUUID()}.${destination.id}/send-now`,
  ); // 409: not waiting
  await admin("POST", `${dest}/resume`);
  await admin("POST", `${dest}/rotate-secret`, { graceHours: 2 });
  await admin("POST", `${dest}/rotate-secret`, { graceHours: 200 });
  await admin("PATCH", dest, { isEnabled: true });
  await admin("POST", `${dest}/redeliver`, since);
  await admin("POST", `${dest}/send-now`);

  // Errors, each with its text in the description.
  await admin("POST", "/forms", { name: "" });
  await admin("POST", `/forms/${form.id}/destinations`, {
    type: "smtp",
    config: { to: ["not an address"] },
  });
  const tooLarge = await admin("POST", `/forms/${form.id}/destinations`, {
    type: "webhook",
    config: { url: sink.url, headers: { "x-big": "a".repeat(45_000) } },
  });
  assert.equal(tooLarge.error, "Destination config too large (max 40KB)");
  await admin("GET", "/forms", undefined, "sk_unknown");
  await admin("GET", `/forms/${crypto.randomUUID()}`);
  await admin("DELETE", `/forms/${form.id}/destinations/${crypto.randomUUID()}`);
  await admin("GET", `/forms/${form.id}/deliveries?limit=0`);
  const badJson = await h.request(`/v1/admin/forms/${form.id}`, {
    method: "PATCH",
    headers: { "x-tenant-key": h.tenantKey, "content-type": "application/json" },
    body: "{",
  });
  await described("PATCH", `/v1/admin/forms/${form.id}`, badJson);
  const notJson = await h.request("/v1/admin/forms", {
    method: "POST",
    headers: { "x-tenant-key": h.tenantKey, "content-type": "text/plain" },
    body: "name=x",
  });
  await described("POST", "/v1/admin/forms", notJson);
  await described("GET", "/v1/admin/forms", await h.request("/v1/admin/forms"));

  // Ingestion and health.
  const submitPath = `/v1/f/${form.publicKey}`;
  const origin = { origin: "https://example.com" };
  await described("POST", submitPath, await h.submit(form.publicKey, { a: 1 }, origin));
  await described("POST", submitPath, await h.submit(form.publicKey, { a: 1 }));
  await described("POST", "/v1/f/pk_unknown", await h.submit("pk_unknown", {}));
  await described(
    "POST",
    submitPath,
    await h.request(submitPath, { method: "POST", headers: { "content-type": "text/csv" } }),
  );
  const pageToken = `/v1/f/${form.publicKey}/page-token`;
  await described("GET", pageToken, await h.request(pageToken));
  await described("GET", "/healthz", await h.request("/healthz"));
  await described("GET", "/readyz", await h.request("/readyz"));

  await admin("GET", "/notifications");
  await admin("PUT", "/notifications", { summary: "weekly" });
  await admin("POST", "/notifications/test");
  await admin("GET", "/notifications/sent");
  await admin("POST", "/notifications/email/confirmation", { address: "nobody@example.org" });
  await admin("POST", "/notifications/webhook/rotate-secret");
  await admin("PUT", "/notifications", { webhook: { url: sink.url } });
  await admin("POST", "/notifications/webhook/rotate-secret", { graceHours: 1 });
  await admin("GET", "/notifications");
  // The rotation last: it ends the harness's key.
  await admin("POST", "/keys/rotate", { expiresInHours: 1 });
  await admin("POST", "/keys/rotate", { expiresInHours: 1000 });
  await admin("POST", "/keys/rotate");
  await admin("POST", "/keys/rotate");
  await admin("DELETE", `/forms/${form.id}`, undefined, "sk_revoked");
  // Every operation but the preflight and the non-JSON answers (the document itself, the
  // metrics: tests/observability_test.ts; the confirmation page: notification_addresses_test.ts)
  // was checked at least once.
  const unchecked = specs.map((op) => `${op.method} ${op.path}`).filter((op) => !covered.has(op));
  assert.deepEqual(unchecked, [
    "options /v1/f/{publicKey}",
    "get /v1/notifications/confirm",
    "post /v1/notifications/confirm",
    "get /metrics",
    "get /v1/openapi.json",
  ]);
});

Deno.test("ingestion's refusals under pressure are described: 429, 408, both 503s", async (t) => {
  const http = loadConfig({}).http;
  const specs = operations("any");
  const statuses = new Set<number>();
  async function submitDescribed(
    h: Awaited<ReturnType<typeof startHarness>>,
    publicKey: string,
    init: RequestInit = {},
  ) {
    const path = `/v1/f/${publicKey}`;
    const response = await h.request(path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"a":1}',
      ...init,
    });
    const status = response.status;
    const { body } = await expectDescribed(specs, { method: "POST", path }, response);
    statuses.add(status);
    return { status, body };
  }

  await t.step("429 past the rate limit", async () => {
    await using h = await startHarness({ rateLimit: { max: 1, windowMs: 60_000 } });
    const form = await h.createForm();
    assert.equal((await submitDescribed(h, form.publicKey)).status, 202);
    const { status, body } = await submitDescribed(h, form.publicKey);
    assert.equal(status, 429);
    assert.equal(body.error, ERRORS.rateLimited.text);
  });

  await t.step("408 for a body not complete in time", async () => {
    await using h = await startHarness({ http: { ...http, bodyTimeoutMs: 100 } });
    const form = await h.createForm();
    // Starts a JSON body and never finishes it.
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => controller.enqueue(new TextEncoder().encode('{"a":')),
    });
    const answer = await submitDescribed(
      h,
      form.publicKey,
      { body, duplex: "half" } as RequestInit,
    );
    assert.equal(answer.status, 408);
    assert.equal(answer.body.error, ERRORS.bodyTimeout.text);
  });

  await t.step("503 Server busy when the body memory budget is full", async () => {
    await using h = await startHarness({ http: { ...http, bodyMemoryBytes: 100 } });
    const form = await h.createForm();
    const { status, body } = await submitDescribed(h, form.publicKey);
    assert.equal(status, 503);
    assert.equal(body.error, ERRORS.serverBusy.text);
  });

  await t.step("503 for a full delivery backlog", async () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => release = resolve);
    await using sink = startWebhookSink(async () => (await held, new Response("ok")));
    await using h = await startHarness({ backlog: { maxJobs: 1, orgShare: 1 } });
    try {
      const form = await h.createForm();
      await h.addDestination(form.id, { type: "webhook", config: { url: sink.url } });
      assert.equal((await submitDescribed(h, form.publicKey)).status, 202);
      const { status, body } = await submitDescribed(h, form.publicKey);
      assert.equal(status, 503);
      assert.equal(body.error, ERRORS.backlogFull.text);
    } finally {
      release();
    }
  });

  assert.deepEqual([...statuses].sort(), [202, 408, 429, 503]);
});

Deno.test("every error of the catalogue is an answer some operation of the document lists", () => {
  const listed = new Set<string>();
  for (const variant of ["any", "json"] as const) {
    for (const op of operations(variant)) {
      for (const [status, answer] of Object.entries(answersOf(op))) {
        if (answer.description === undefined) continue;
        for (const text of answer.description.split("; ")) listed.add(`${status} ${text}`);
      }
    }
  }
  // An unknown path and a wrong method are no operation's: the document's description names them.
  const unlisted = Object.entries(ERRORS)
    .filter(([name]) => name !== "notFound" && name !== "methodNotAllowed")
    .filter(([, error]) => !listed.has(`${error.status} ${error.text}`))
    .map(([name]) => name);
  assert.deepEqual(unlisted, []);
});

Deno.test("public requests are matched by Hono's RegExpRouter; the admin API, an application of its own, answers behind it", async () => {
  await using h = await startHarness();
  const forms = await h.admin("GET", "/forms");
  assert.equal(forms.status, 200);
  const unauthenticated = await h.request("/v1/admin/forms");
  assert.equal(unauthenticated.status, 401);
  const unknownAdminPath = await h.admin("GET", "/no-such-thing");
  assert.equal(unknownAdminPath.status, 404);
  assert.deepEqual(await unknownAdminPath.json(), { ok: false, error: ERRORS.notFound.text });
  const unknownPath = await h.request("/v1/adminx");
  assert.equal(unknownPath.status, 404);
  // SmartRouter names the router it settled on at its first match.
  assert.match((h.service.app.router as { name: string }).name, /RegExpRouter/);
});
