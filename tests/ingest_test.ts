import assert from "node:assert/strict";
import { expectError } from "./helpers/assert.ts";
import { createApp } from "../app.ts";
import { MAX_JSON_DEPTH } from "../ingest/parse.ts";
import { createBodyGate } from "../ingest/body_gate.ts";
import { createOutboundBudget } from "../delivery/outbound_budget.ts";
import { createBacklogReader } from "../store/backlog.ts";
import { createRefusalCounter } from "../store/refusals.ts";
import { createRateLimiter } from "../store/rate_limit.ts";
import { MAX_METADATA_CHARS } from "../ingest/steps.ts";
import { submissionPathKey } from "../routes/ingest.ts";
import { createIngestLoad } from "../delivery/ingest_load.ts";
import { createDb } from "../store/db.ts";
import type { StoredJob } from "../store/job_record.ts";
import { createSubmissionWriter } from "../store/submissions.ts";
import { acceptedAtOf } from "../store/submission_id.ts";
import { startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { rawHttp, serveApp } from "./helpers/serve.ts";

const WEBHOOK = { type: "webhook", config: { url: "https://hooks.example.com/in" } };
/** Submission ids are UUIDs of version 7: they lead with the acceptance time (store/submission_id.ts). */
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ANY_415 =
  "Unsupported content type: use application/json, application/x-www-form-urlencoded or multipart/form-data";

/** A harness without a delivery engine, one form with one webhook destination. */
async function setUp(overrides = {}, formSettings: Record<string, unknown> = {}) {
  const h = await startHarness(overrides, { deliver: false });
  const form = await h.createForm(formSettings);
  const destinationId = await h.addDestination(form.id, WEBHOOK);
  const post = (body: BodyInit | null, headers: Record<string, string> = {}) =>
    h.request(`/v1/f/${form.publicKey}`, { method: "POST", headers, body });
  return { h, form, destinationId, post };
}

/** Decrypted envelopes of every stored submission. */
async function storedEnvelopes(h: Awaited<ReturnType<typeof startHarness>>) {
  const { openEnvelope } = await import("../store/envelope.ts");
  const { decodeJob } = await import("../store/job_record.ts");
  const { readEnvelopeData } = await import("../store/envelope.ts");
  const envelopes = [];
  const seen = new Set<string>();
  for await (const entry of h.service.db.kv.list<StoredJob>({ prefix: ["jobs"] })) {
    const job = decodeJob(entry);
    if (seen.has(job.submissionId)) continue;
    seen.add(job.submissionId);
    const firstChunk = (await h.service.db.kv.get<Uint8Array<ArrayBuffer>>(
      ["envelopes", job.submittedAt, job.submissionId, 0],
    )).value;
    const sealed = await readEnvelopeData(h.service.db, {
      job,
      versionstamp: "",
      envelope: firstChunk,
    });
    assert.ok(sealed instanceof Uint8Array, "what KV holds is sealed");
    envelopes.push(await openEnvelope(h.service.db.sealer, job.submissionId, sealed));
  }
  return envelopes;
}

Deno.test("POST /v1/f/:publicKey accepts any JSON value and answers 202 with the submission id", async () => {
  const { h, form, post } = await setUp();
  await using _ = h;
  for (const value of [{ a: 1 }, [1, "two"], "text", 42, null, true]) {
    const response = await post(JSON.stringify(value), { "content-type": "application/json" });
    assert.equal(response.status, 202);
    assert.match(response.headers.get("content-type") ?? "", /application\/json/);
    const body = await response.json();
    assert.equal(body.ok, true);
    assert.match(body.submissionId, UUID_V7);
  }
  const payloads = (await storedEnvelopes(h)).map((e) => JSON.stringify(e.payload)).sort();
  assert.deepEqual(payloads, ['"text"', "42", '[1,"two"]', '{"a":1}', "null", "true"].sort());
  assert.ok((await storedEnvelopes(h)).every((e) => e.formId === form.id));
});

Deno.test("content types take charset and boundary parameters in any case", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  const json = await post('{"a":1}', { "content-type": "Application/JSON; Charset=UTF-8" });
  assert.equal(json.status, 202);
  const form = await post("a=1", {
    "content-type": "APPLICATION/X-WWW-FORM-URLENCODED; charset=utf-8",
  });
  assert.equal(form.status, 202);
  const boundary = "AaB03x";
  const multipart = await post(
    `--${boundary}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--${boundary}--\r\n`,
    { "content-type": `Multipart/Form-Data; BOUNDARY="${boundary}"; charset=UTF-8` },
  );
  assert.equal(multipart.status, 202);
});

Deno.test("form fields are normalised: once a string, repeated an array, name[] kept", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  const urlencoded = await post(
    "name=Ada+Lovelace&tag=a&tag=b&tag=c&items%5B%5D=x&items%5B%5D=y&note=caf%C3%A9&__proto__=p&empty=",
    { "content-type": "application/x-www-form-urlencoded" },
  );
  assert.equal(urlencoded.status, 202);
  const fd = new FormData();
  fd.append("name", "Grace");
  fd.append("tag", "x");
  fd.append("tag", "y");
  fd.append("items[]", "1");
  const multipart = await h.request(
    `/v1/f/${(await h.admin("GET", "/forms").then((r) => r.json())).forms[0].publicKey}`,
    {
      method: "POST",
      body: fd,
    },
  );
  assert.equal(multipart.status, 202);
  const payloads = (await storedEnvelopes(h)).map((e) => e.payload as Record<string, unknown>);
  const ada = payloads.find((p) => p.name === "Ada Lovelace")!;
  assert.equal(
    JSON.stringify(ada),
    '{"name":"Ada Lovelace","tag":["a","b","c"],"items[]":["x","y"],"note":"café","__proto__":"p","empty":""}',
  );
  assert.equal(Object.getPrototypeOf(ada), Object.prototype);
  const grace = payloads.find((p) => p.name === "Grace")!;
  assert.deepEqual(grace, { name: "Grace", tag: ["x", "y"], "items[]": "1" });
});

Deno.test("a multipart body with a file part is refused, even an empty file input", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  const fd = new FormData();
  fd.append("name", "Ada");
  fd.append("cv", new File(["%PDF"], "cv.pdf", { type: "application/pdf" }));
  const response = await h.request(
    `/v1/f/${(await h.admin("GET", "/forms").then((r) => r.json())).forms[0].publicKey}`,
    { method: "POST", body: fd },
  );
  await expectError(response, 400, "File uploads are not supported");
  const b = "XyZ";
  const empty = await post(
    `--${b}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--${b}\r\nContent-Disposition: form-data; name="f"; filename=""\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--${b}--\r\n`,
    { "content-type": `multipart/form-data; boundary=${b}` },
  );
  await expectError(empty, 400, "File uploads are not supported");
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 0);
});

Deno.test("other content types get 415 with the contract's text", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  for (const type of ["text/plain", "application/xml", "application/jsonx", ""]) {
    const headers: Record<string, string> = type ? { "content-type": type } : {};
    await expectError(await post("x", headers), 415, ANY_415);
  }
});

Deno.test("INGEST_CONTENT_TYPES=json accepts JSON objects only (Variant B)", async () => {
  const { h, post } = await setUp({ ingestContentTypes: "json" });
  await using _ = h;
  assert.equal((await post('{"a":1}', { "content-type": "application/json" })).status, 202);
  await expectError(
    await post("a=1", { "content-type": "application/x-www-form-urlencoded" }),
    415,
    "Unsupported content type: use application/json",
  );
  for (const value of ["[1]", '"s"', "1", "null"]) {
    await expectError(
      await post(value, { "content-type": "application/json" }),
      400,
      "Invalid JSON payload",
    );
  }
});

Deno.test("a 128 KB payload is accepted and stored in chunks under the KV value limit", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  const filler = "x".repeat(131072 - '{"f":""}'.length);
  const body = `{"f":"${filler}"}`;
  assert.equal(new TextEncoder().encode(body).length, 131072);
  const response = await post(body, { "content-type": "application/json" });
  assert.equal(response.status, 202);
  let chunks = 0;
  for await (const entry of h.service.db.kv.list<Uint8Array>({ prefix: ["envelopes"] })) {
    assert.ok(entry.value.length < 65536);
    chunks++;
  }
  assert.ok(chunks >= 3, `expected several chunks, got ${chunks}`);
  const [envelope] = await storedEnvelopes(h);
  assert.equal((envelope.payload as { f: string }).f, filler);
});

Deno.test("Content-Length over 131072 is answered 413 without reading the body", async () => {
  const { h, form } = await setUp();
  await using _ = h;
  await using served = serveApp(h.service.app);
  // The body never comes: a server that tried to read it would hang instead of answering.
  const answer = await rawHttp(
    served.port,
    `POST /v1/f/${form.publicKey} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 131073\r\n\r\n`,
    { until: /\r\n\r\n[\s\S]*\}/ },
  );
  assert.match(answer, /^HTTP\/1\.1 413/);
  assert.match(answer, /"error":"Payload too large \(max 128KB\)"/);
});

Deno.test("a chunked body over 128 KB is cut off at the cap and answered 413", async () => {
  const { h, form } = await setUp();
  await using _ = h;
  await using served = serveApp(h.service.app);
  let sent = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= 50 * 1024 * 1024) return controller.close();
      sent += 16384;
      controller.enqueue(new Uint8Array(16384).fill(0x20));
    },
  });
  const response = await fetch(`${served.origin}/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  await expectError(response, 413, "Payload too large (max 128KB)");
  assert.ok(sent < 50 * 1024 * 1024, `the server read on: ${sent} bytes sent`);
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 0);
});

Deno.test("a Content-Length that understates the body is cut off at the cap and answered 413", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  const big = new TextEncoder().encode(JSON.stringify({ f: "y".repeat(200_000) }));
  const response = await post(big, { "content-type": "application/json", "content-length": "10" });
  await expectError(response, 413, "Payload too large (max 128KB)");
});

Deno.test("unknown or disabled public keys are 404 Form endpoint not found or disabled", async () => {
  const { h, form, post } = await setUp();
  await using _ = h;
  const json = { "content-type": "application/json" };
  const unknown = await h.request("/v1/f/pk_doesnotexistdoesnotexist", {
    method: "POST",
    headers: json,
    body: "{}",
  });
  await expectError(unknown, 404, "Form endpoint not found or disabled");
  const long = await h.request(`/v1/f/pk_${"a".repeat(5000)}`, {
    method: "POST",
    headers: json,
    body: "{}",
  });
  await expectError(long, 404, "Form endpoint not found or disabled");
  await h.admin("PATCH", `/forms/${form.id}`, { enabled: false });
  await expectError(await post("{}", json), 404, "Form endpoint not found or disabled");
  await h.admin("PATCH", `/forms/${form.id}`, { enabled: true });
  assert.equal((await post("{}", json)).status, 202);
});

Deno.test("CORS preflight with an empty allow-list answers 204 with *", async () => {
  const { h, form } = await setUp();
  await using _ = h;
  const response = await h.request(`/v1/f/${form.publicKey}`, {
    method: "OPTIONS",
    headers: { origin: "https://anywhere.example", "access-control-request-method": "POST" },
  });
  assert.equal(response.status, 204);
  assert.equal(response.headers.get("access-control-allow-origin"), "*");
  assert.equal(response.headers.get("access-control-allow-methods"), "POST");
  assert.equal(
    response.headers.get("access-control-allow-headers"),
    "Content-Type, x-captcha-token",
  );
  assert.equal(response.headers.get("access-control-max-age"), "86400");
});

Deno.test("CORS with an allow-list echoes a matching origin with Vary and refuses others with 403", async (t) => {
  const { h, form, post } = await setUp({}, {
    allowedOrigins: ["https://Shop.Example.com/contact/", "http://localhost:3000"],
  });
  await using _ = h;
  const preflight = (origin?: string) =>
    h.request(`/v1/f/${form.publicKey}`, {
      method: "OPTIONS",
      headers: origin ? { origin } : {},
    });
  await t.step("preflight from a listed origin (host case and path ignored)", async () => {
    const response = await preflight("https://shop.example.com");
    assert.equal(response.status, 204);
    assert.equal(response.headers.get("access-control-allow-origin"), "https://shop.example.com");
    assert.match(response.headers.get("vary") ?? "", /Origin/);
  });
  await t.step("preflight from another origin: 403 and no allow-origin", async () => {
    for (
      const origin of [
        "https://evil.example",
        "http://shop.example.com",
        "https://shop.example.com:8443",
        undefined,
      ]
    ) {
      const response = await preflight(origin);
      await expectError(response, 403, "Origin is not allowed for this form");
      assert.equal(response.headers.get("access-control-allow-origin"), null);
    }
  });
  await t.step("POST from a listed origin: 202 with the origin echoed", async () => {
    const response = await post("{}", {
      "content-type": "application/json",
      origin: "http://localhost:3000",
    });
    assert.equal(response.status, 202);
    assert.equal(response.headers.get("access-control-allow-origin"), "http://localhost:3000");
    assert.match(response.headers.get("vary") ?? "", /Origin/);
  });
  await t.step("POST without or from another origin: 403, nothing stored", async () => {
    const before = await countKeys(h.service.db.kv, "jobs");
    const origins: Record<string, string>[] = [{}, { origin: "https://evil.example" }, {
      origin: "null",
    }];
    for (const headers of origins) {
      const response = await post("{}", { "content-type": "application/json", ...headers });
      await expectError(response, 403, "Origin is not allowed for this form");
      assert.equal(response.headers.get("access-control-allow-origin"), null);
    }
    assert.equal(await countKeys(h.service.db.kv, "jobs"), before);
  });
  await t.step("error answers to a listed origin carry the allow-origin header", async () => {
    const response = await post("not json", {
      "content-type": "application/json",
      origin: "https://shop.example.com",
    });
    await expectError(response, 400, "Invalid JSON payload");
    assert.equal(response.headers.get("access-control-allow-origin"), "https://shop.example.com");
    const unsupported = await post("x", {
      "content-type": "text/plain",
      origin: "https://shop.example.com",
    });
    await expectError(unsupported, 415, ANY_415);
    assert.equal(
      unsupported.headers.get("access-control-allow-origin"),
      "https://shop.example.com",
    );
  });
});

Deno.test("the envelope carries the form, the payload and request metadata", async () => {
  const { h, form, post } = await setUp({ clientIpHeader: "cf-connecting-ip" });
  await using _ = h;
  const before = Date.now();
  await post('{"msg":"hi"}', {
    "content-type": "application/json",
    origin: "https://Site.example:443/",
    "user-agent": "TestAgent/1.0",
    referer: "https://site.example/contact",
    "cf-connecting-ip": "203.0.113.7",
  });
  await post('{"msg":"bare"}', { "content-type": "application/json" });
  const envelopes = await storedEnvelopes(h);
  const full = envelopes.find((e) => (e.payload as { msg: string }).msg === "hi")!;
  assert.match(full.submissionId, UUID_V7);
  assert.equal(acceptedAtOf(full.submissionId), Date.parse(full.metadata.submittedAt));
  assert.equal(full.formId, form.id);
  assert.equal(full.formName, "Contact");
  assert.deepEqual(full.metadata, {
    origin: "https://site.example",
    ip: "203.0.113.7",
    userAgent: "TestAgent/1.0",
    referer: "https://site.example/contact",
    submittedAt: full.metadata.submittedAt,
  });
  assert.ok(Date.parse(full.metadata.submittedAt) >= before);
  assert.equal(new Date(full.metadata.submittedAt).toISOString(), full.metadata.submittedAt);
  const bare = envelopes.find((e) => (e.payload as { msg: string }).msg === "bare")!;
  assert.equal(bare.metadata.ip, null, "no header and no connection in app.request");
  assert.equal(bare.metadata.origin, null);
  assert.equal(bare.metadata.referer, null);
});

Deno.test("metadata strings are cut to a bounded length", async () => {
  const { h, post } = await setUp();
  await using _ = h;
  await post("{}", {
    "content-type": "application/json",
    "user-agent": "u".repeat(60_000),
    referer: "https://site.example/" + "r".repeat(60_000),
  });
  const [envelope] = await storedEnvelopes(h);
  assert.equal(envelope.metadata.userAgent, "u".repeat(MAX_METADATA_CHARS));
  assert.equal(envelope.metadata.referer?.length, MAX_METADATA_CHARS);
});

Deno.test("metadata.ip follows CLIENT_IP_HEADER, else the connection's address", async (t) => {
  await t.step("by default a client-written header is ignored", async () => {
    const { h, form } = await setUp();
    await using _ = h;
    await using served = serveApp(h.service.app);
    const response = await fetch(`${served.origin}/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "cf-connecting-ip": "203.0.113.9",
        "x-forwarded-for": "203.0.113.10",
      },
      body: "{}",
    });
    assert.equal(response.status, 202);
    await response.body?.cancel();
    assert.equal((await storedEnvelopes(h))[0].metadata.ip, "127.0.0.1");
  });
  await t.step("x-forwarded-for: the entry the trusted proxy added, not the client's", async () => {
    const { h, post } = await setUp({ clientIpHeader: "x-forwarded-for", trustedProxyHops: 1 });
    await using _ = h;
    await post("{}", {
      "content-type": "application/json",
      "x-forwarded-for": "6.6.6.6, 198.51.100.23",
    });
    assert.equal((await storedEnvelopes(h))[0].metadata.ip, "198.51.100.23");
  });
  await t.step("a custom header", async () => {
    const { h, post } = await setUp({ clientIpHeader: "x-real-ip" });
    await using _ = h;
    await post("{}", {
      "content-type": "application/json",
      "x-real-ip": "198.51.100.4",
      "cf-connecting-ip": "203.0.113.9",
    });
    assert.equal((await storedEnvelopes(h))[0].metadata.ip, "198.51.100.4");
  });
  await t.step("the header disabled: the remote address of the connection", async () => {
    const { h, form } = await setUp({ clientIpHeader: null });
    await using _ = h;
    await using served = serveApp(h.service.app);
    const response = await fetch(`${served.origin}/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/json", "cf-connecting-ip": "203.0.113.9" },
      body: "{}",
    });
    assert.equal(response.status, 202);
    await response.body?.cancel();
    assert.equal((await storedEnvelopes(h))[0].metadata.ip, "127.0.0.1");
  });
});

Deno.test("an unparsable CLIENT_IP_HEADER value counts as the connection's address, not a key shared by all", async () => {
  const { h, form } = await setUp({
    clientIpHeader: "x-real-ip",
    rateLimit: { max: 1, windowMs: 60_000 },
  });
  await using _ = h;
  await using served = serveApp(h.service.app);
  /** A post from `localAddress` whose header holds no address. */
  const postFrom = async (localAddress: string, value: string) => {
    using client = Deno.createHttpClient({ localAddress, poolMaxIdlePerHost: 0 });
    const response = await fetch(`${served.origin}/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-real-ip": value },
      body: "{}",
      client,
    });
    await response.body?.cancel();
    return response.status;
  };
  assert.equal(await postFrom("127.0.0.2", "unknown"), 202);
  assert.equal(await postFrom("127.0.0.2", "1.2.3.4, 5.6.7.8"), 429, "the same connection address");
  // Another client with an unparsable value: its own address, its own count.
  assert.equal(await postFrom("127.0.0.3", "unknown"), 202);
  assert.equal(await postFrom("127.0.0.4", ""), 202);
  const ips = (await storedEnvelopes(h)).map((e) => e.metadata.ip).sort();
  assert.deepEqual(ips, ["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
});

Deno.test("accepting writes the envelope, one job per enabled destination and their wake-ups in one commit", async () => {
  const { h, form, destinationId, post } = await setUp();
  await using _ = h;
  const second = await h.addDestination(form.id, WEBHOOK);
  const disabled = await h.addDestination(form.id, { ...WEBHOOK, isEnabled: false });
  const wakes: unknown[] = [];
  const listener = h.service.db.kv.listenQueue((message) => {
    wakes.push(message);
  });
  try {
    const response = await post('{"a":1}', { "content-type": "application/json" });
    const { submissionId } = await response.json();
    const { decodeJob } = await import("../store/job_record.ts");
    const jobs = [];
    for await (
      const entry of h.service.db.kv.list<StoredJob>({
        prefix: ["jobs"],
      })
    ) {
      jobs.push({ key: entry.key, value: decodeJob(entry) });
    }
    assert.ok(jobs.every((j) => j.key[2] === submissionId));
    assert.deepEqual(jobs.map((j) => j.key[3]).sort(), [destinationId, second].sort());
    assert.ok(!jobs.some((j) => j.key[3] === disabled));
    for (const job of jobs) {
      assert.equal(job.value.state, "pending");
      assert.equal(job.value.attempts, 0);
    }
    assert.equal(await countKeys(h.service.db.kv, "envelopes"), 1);
    const { waitFor } = await import("./helpers/wait.ts");
    await waitFor(() => wakes.length === 1, { message: "one wake-up for the submission" });
    const { wake } = wakes[0] as { wake: [number, string, string][] };
    assert.ok(wake.every(([, id]) => id === submissionId));
    assert.deepEqual(wake.map(([, , dest]) => dest).sort(), [destinationId, second].sort());
  } finally {
    await h.close();
    await listener;
  }
});

Deno.test("a form with no enabled destination answers 202 and stores nothing", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  await h.addDestination(form.id, { ...WEBHOOK, isEnabled: false });
  const response = await h.submit(form.publicKey, { a: 1 });
  assert.equal(response.status, 202);
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 0);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 0);
});

/** `kv` with every atomic operation passed through `patch` before it is handed out. */
function withAtomic(kv: Deno.Kv, patch: (op: Deno.AtomicOperation) => void): Deno.Kv {
  return new Proxy(kv, {
    get(target, property) {
      if (property === "atomic") {
        return () => {
          const op = target.atomic();
          patch(op);
          return op;
        };
      }
      const value = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

Deno.test("a failed commit answers 503 and leaves nothing behind", async () => {
  const { h, form } = await setUp();
  await using _ = h;
  const kv = h.service.db.kv;
  const failing = withAtomic(kv, (op) => {
    op.commit = () => Promise.reject(new Error("database is locked"));
  });
  const db = createDb(failing, h.service.db.sealer, { queues: true });
  const app = createApp({
    config: h.config,
    db: h.service.db,
    connectors: (await import("../connectors/mod.ts")).createConnectors(h.config),
    logger: h.service.logger,
    writer: createSubmissionWriter(db),
    engine: null,
    ingestLoad: createIngestLoad(),
    bodyGate: createBodyGate(h.config.http),
    outbound: createOutboundBudget(h.service.db, h.config),
    backlog: createBacklogReader(h.service.db, { limit: h.config.readyMaxBacklog }),
    refusals: createRefusalCounter(h.service.db),
    rateLimiter: createRateLimiter(h.service.db, h.config.rateLimit),
    delivering: () => false,
  });
  const response = await app.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"a":1}',
  });
  await expectError(response, 503, "Submission could not be stored: try again");
  for (const prefix of ["jobs", "envelopes"]) {
    assert.equal(await countKeys(h.service.db.kv, prefix), 0);
  }
});

Deno.test("concurrent submissions share atomic commits", async () => {
  await using h = await startHarness({}, { deliver: false });
  let commits = 0;
  const kv = h.service.db.kv;
  const counting = withAtomic(kv, (op) => {
    const commit = op.commit.bind(op);
    op.commit = () => {
      commits++;
      return commit();
    };
  });
  const writer = createSubmissionWriter(createDb(counting, h.service.db.sealer));
  const submissions = Array.from({ length: 500 }, (_, i) => ({
    submissionId: crypto.randomUUID(),
    formId: "f",
    orgId: "o",
    sealedEnvelope: new Uint8Array(200).fill(i % 256),
    destinations: [{ id: "d1", type: "webhook" as const }, { id: "d2", type: "webhook" as const }],
    submittedAt: Date.now(),
    envelopeTtlMs: 60_000,
  }));
  await Promise.all(submissions.map((s) => writer.write(s)));
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 1000);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 500);
  assert.ok(commits < 50, `500 submissions took ${commits} commits`);
  assert.ok(commits >= 4, "each commit stays within 450 mutations: 500 × 3 need at least 4");
});

Deno.test("the payload is never stored or logged in plaintext, in KV entries or the KV file", async () => {
  const dir = await Deno.makeTempDir();
  const marker = `MARKER-${crypto.randomUUID()}`;
  const h = await startHarness({ kvPath: `${dir}/formrelay.kv` }, { deliver: false });
  try {
    const form = await h.createForm();
    await h.addDestination(form.id, WEBHOOK);
    assert.equal(
      (await h.submit(form.publicKey, { message: marker, email: `${marker}@example.com` })).status,
      202,
    );
    const urlencoded = await h.request(`/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `message=${marker}`,
    });
    assert.equal(urlencoded.status, 202);
    let entries = 0;
    for await (const entry of h.service.db.kv.list({ prefix: [] })) {
      entries++;
      const value = entry.value instanceof Uint8Array
        ? new TextDecoder("latin1").decode(entry.value)
        : JSON.stringify(entry.value);
      assert.ok(!value.includes(marker), `plaintext marker in ${JSON.stringify(entry.key)}`);
      assert.ok(!JSON.stringify(entry.key).includes(marker));
    }
    assert.ok(entries > 0);
    assert.ok(!h.logs.join("\n").includes(marker));
  } finally {
    await h.close();
  }
  let files = 0;
  for await (const file of Deno.readDir(dir)) {
    const bytes = await Deno.readFile(`${dir}/${file.name}`);
    files++;
    assert.ok(!new TextDecoder("latin1").decode(bytes).includes(marker), `marker in ${file.name}`);
  }
  assert.ok(files >= 2, "the KV file and its key file were read");
  await Deno.remove(dir, { recursive: true });
});

Deno.test("bad input gets a clear 4xx and the service keeps serving", async (t) => {
  const { h, form, post } = await setUp();
  await using _ = h;
  await using served = serveApp(h.service.app);
  const json = { "content-type": "application/json" };
  const urlencoded = { "content-type": "application/x-www-form-urlencoded" };
  await t.step("invalid JSON", async () => {
    await expectError(await post('{"a":', json), 400, "Invalid JSON payload");
    await expectError(
      await post(new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]), json),
      400,
      "Invalid JSON payload",
    );
  });
  await t.step("an empty body", async () => {
    await expectError(await post("", json), 400, "Invalid JSON payload");
    await expectError(await post("", urlencoded), 400, "Invalid form payload");
  });
  await t.step("truncated multipart and multipart without boundary", async () => {
    const b = "XyZ";
    const whole = `--${b}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--${b}--\r\n`;
    await expectError(
      await post(whole.slice(0, 50), { "content-type": `multipart/form-data; boundary=${b}` }),
      400,
      "Invalid form payload",
    );
    await expectError(
      await post(whole, { "content-type": "multipart/form-data" }),
      400,
      "Invalid form payload",
    );
  });
  await t.step("urlencoded with invalid percent-escapes or bytes", async () => {
    await expectError(await post("a=%ZZ", urlencoded), 400, "Invalid form payload");
    await expectError(await post("a=%C3%28", urlencoded), 400, "Invalid form payload");
    await expectError(
      await post(new Uint8Array([0x61, 0x3d, 0xff]), urlencoded),
      400,
      "Invalid form payload",
    );
  });
  await t.step("JSON nested 60 000 levels deep", async () => {
    const deep = "[".repeat(60_000) + "]".repeat(60_000);
    const body = await expectError(await post(deep, json), 400, "Invalid JSON payload");
    assert.match(body.detail, new RegExp(`${MAX_JSON_DEPTH}`));
    const ok = "[".repeat(MAX_JSON_DEPTH) + "]".repeat(MAX_JSON_DEPTH);
    assert.equal((await post(ok, json)).status, 202);
  });
  await t.step("10 000 form fields", async () => {
    const fields = (n: number) => Array.from({ length: n }, (_, i) => `f${i}=${i}`).join("&");
    const body = await expectError(
      await post(fields(10_000), urlencoded),
      400,
      "Invalid form payload",
    );
    assert.equal(body.detail, "More than 1000 fields");
    await expectError(await post(fields(1001), urlencoded), 400, "Invalid form payload");
    assert.equal((await post(fields(1000), urlencoded)).status, 202, "1000 fields are taken");
  });
  await t.step("a 1 MB header", async () => {
    const response = await fetch(`${served.origin}/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { ...json, "x-big": "h".repeat(1024 * 1024) },
      body: "{}",
    }).catch((error) => error);
    if (response instanceof Response) {
      assert.ok(response.status >= 400 && response.status < 500, `status ${response.status}`);
      await response.body?.cancel();
    } else {
      // The server may refuse by closing the connection; it must keep serving afterwards.
      assert.ok(response instanceof TypeError);
    }
  });
  await t.step("a wrong method", async () => {
    await expectError(await h.request(`/v1/f/${form.publicKey}`), 405, "Method not allowed");
    await expectError(
      await h.request(`/v1/f/${form.publicKey}`, { method: "PUT" }),
      405,
      "Method not allowed",
    );
  });
  await t.step("a public key of 5 000 characters", async () => {
    const response = await fetch(`${served.origin}/v1/f/pk_${"k".repeat(5000)}`, {
      method: "POST",
      headers: json,
      body: "{}",
    });
    await expectError(response, 404, "Form endpoint not found or disabled");
  });
  await t.step("still serving: a valid submission over the wire is accepted", async () => {
    const response = await fetch(`${served.origin}/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: json,
      body: '{"ok":true}',
    });
    assert.equal(response.status, 202);
    await response.body?.cancel();
  });
});

Deno.test("a post to a form path is answered without the router only for a plain pk_ key", () => {
  const key = "pk_" + "a".repeat(24);
  assert.equal(submissionPathKey(`http://localhost/v1/f/${key}`), key);
  assert.equal(submissionPathKey(`https://forms.example.com/v1/f/${key}?ref=1`), key);
  for (
    const url of [
      `http://localhost/v1/f/${key}/`,
      `http://localhost/v1/f/${key}/token`,
      `http://localhost/v1/f/%70k_${"a".repeat(24)}`,
      `http://localhost//v1/f/${key}`,
      `http://localhost/v1/admin/forms`,
      `http://localhost/x/v1/f/${key}`,
    ]
  ) {
    assert.equal(submissionPathKey(url), null, url);
  }
});

Deno.test("a post the router takes (a key to decode) is answered as one answered without it", async () => {
  const { h, form, post } = await setUp({}, { allowedOrigins: ["https://site.example"] });
  await using _ = h;
  const headers = { "content-type": "application/json", origin: "https://site.example" };
  const direct = await post(JSON.stringify({ n: 1 }), headers);
  const routed = await h.request(`/v1/f/%70${form.publicKey.slice(1)}`, {
    method: "POST",
    headers,
    body: JSON.stringify({ n: 2 }),
  });
  for (const response of [direct, routed]) {
    assert.equal(response.status, 202);
    assert.equal(response.headers.get("content-type"), "application/json");
    assert.equal(response.headers.get("access-control-allow-origin"), "https://site.example");
    assert.equal(response.headers.get("vary"), "Origin");
    assert.match((await response.json()).submissionId, UUID_V7);
  }
  const payloads = (await storedEnvelopes(h)).map((envelope) => envelope.payload);
  assert.deepEqual(payloads.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))), [
    { n: 1 },
    { n: 2 },
  ]);
  // Refused alike: a site the form does not allow.
  for (const path of [`/v1/f/${form.publicKey}`, `/v1/f/%70${form.publicKey.slice(1)}`]) {
    const response = await h.request(path, {
      method: "POST",
      headers: { ...headers, origin: "https://evil.example" },
      body: "{}",
    });
    await expectError(response, 403, "Origin is not allowed for this form");
  }
});

Deno.test("an error of ours answers 500 with the form's CORS headers, logged without the payload", async () => {
  const { h, form, post } = await setUp({}, { allowedOrigins: ["https://site.example"] });
  await using _ = h;
  const headers = { "content-type": "application/json", origin: "https://site.example" };
  const gate = h.service.bodyGate;
  const admit = gate.admit;
  gate.admit = () => {
    throw new Error("disk on fire");
  };
  try {
    const response = await post(JSON.stringify({ secret: "hunter2" }), headers);
    await expectError(response, 500, "Internal error");
    assert.equal(response.headers.get("access-control-allow-origin"), "https://site.example");
  } finally {
    gate.admit = admit;
  }
  const failure = h.logs.map((line) => JSON.parse(line)).find((line) =>
    line.msg === "unhandled error"
  );
  assert.equal(failure?.formId, form.id);
  assert.match(failure?.error, /disk on fire/);
  assert.ok(!h.logs.some((line) => line.includes("hunter2")), "no payload in the log");
  assert.equal((await post(JSON.stringify({ n: 1 }), headers)).status, 202);
});
