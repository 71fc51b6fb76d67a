import assert from "node:assert/strict";
import { loadConfig } from "../config.ts";
import { startService } from "../service.ts";
import { createOrg } from "../store/orgs.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { startServiceProcess } from "./helpers/process.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

/** A sample's value in Prometheus text, 0 when absent; `labels` must match exactly as printed. */
function sample(text: string, name: string, labels = ""): number {
  const prefix = labels === "" ? `${name} ` : `${name}{${labels}} `;
  const line = text.split("\n").find((l) => l.startsWith(prefix));
  return line === undefined ? 0 : Number(line.slice(prefix.length));
}

async function scrape(h: Harness, headers: Record<string, string> = {}): Promise<string> {
  const response = await h.request("/metrics", { headers });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  return await response.text();
}

/** Runs Debian's promtool on exposition text; its output when it complains. */
async function promtoolCheck(text: string): Promise<{ code: number; output: string }> {
  const child = new Deno.Command("promtool", {
    args: ["check", "metrics"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { code, output: decoder.decode(stdout) + decoder.decode(stderr) };
}

const ATTEMPTS = "formrelay_delivery_attempts_total";
const webhookLabels = (outcome: string) =>
  `type="webhook",outcome="${outcome}",form_id="",destination_id=""`;

Deno.test("GET /metrics: promtool accepts it, and counters move with a submission, a retry, a delivery and refusals", async () => {
  let hits = 0;
  await using sink = startWebhookSink(() => new Response("", { status: ++hits === 1 ? 500 : 200 }));
  await using h = await startHarness();
  const form = await h.createForm();
  await h.addDestination(form.id, { type: "webhook", config: { url: sink.url } });
  const before = await scrape(h);

  const response = await h.submit(form.publicKey, { email: "a@example.com" });
  assert.equal(response.status, 202);
  await waitFor(
    async () => sample(await scrape(h), ATTEMPTS, webhookLabels("delivered")) > 0,
    { message: "a delivery counted" },
  );
  const unknown = await h.submit("pk_" + "x".repeat(40), { a: 1 });
  assert.equal(unknown.status, 404);
  const wrongType = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "text/plain" },
    body: "hi",
  });
  assert.equal(wrongType.status, 415);
  const trap = await h.createForm({ name: "Trap", honeypotField: "website" });
  await h.addDestination(trap.id, { type: "webhook", config: { url: sink.url } });
  assert.equal((await h.submit(trap.publicKey, { website: "spam.example" })).status, 202);
  const after = await scrape(h);

  const moved = (name: string, labels = "") =>
    sample(after, name, labels) - sample(before, name, labels);
  assert.equal(moved("formrelay_submissions_accepted_total", 'form_id=""'), 1);
  assert.equal(moved(ATTEMPTS, webhookLabels("retry")), 1);
  assert.equal(moved(ATTEMPTS, webhookLabels("delivered")), 1);
  assert.equal(
    moved("formrelay_submissions_refused_total", 'status="404",reason="not_found"'),
    1,
  );
  assert.equal(moved("formrelay_submissions_refused_total", 'status="415",reason="type"'), 1);
  assert.equal(
    moved("formrelay_submissions_refused_total", 'status="202",reason="spam"'),
    1,
  );
  assert.equal(moved("formrelay_delivery_attempt_duration_seconds_count", 'type="webhook"'), 2);
  assert.equal(moved("formrelay_delivery_latency_seconds_count", 'type="webhook"'), 1);
  assert.ok(moved("formrelay_kv_commit_duration_seconds_count") >= 3, "KV commits timed");
  assert.equal(sample(after, "formrelay_delivery_engine_running"), 1);
  assert.ok(after.includes('formrelay_jobs{state="held"} 0'), after);
  assert.equal(sample(after, "formrelay_destinations_paused"), 0);

  const check = await promtoolCheck(after);
  assert.equal(check.code, 0, check.output);
});

Deno.test("GET /metrics asks for the bearer token when METRICS_TOKEN is set", async () => {
  const token = "metrics-token-0123456789";
  await using h = await startHarness({ metrics: { token, perForm: false } });
  for (const authorization of [undefined, "Bearer wrong-token", `Basic ${token}`]) {
    const response = await h.request("/metrics", {
      headers: authorization ? { authorization } : {},
    });
    assert.equal(response.status, 401);
    assert.equal(response.headers.get("www-authenticate"), 'Bearer realm="metrics"');
    assert.deepEqual(await response.json(), { ok: false, error: "Invalid metrics token" });
  }
  const text = await scrape(h, { authorization: `Bearer ${token}` });
  assert.match(text, /^# HELP formrelay_/m);
});

Deno.test("GET /readyz answers 200 while the process can accept and deliver, 503 naming what failed", async (t) => {
  await t.step("unready when the KV is closed", async () => {
    await using h = await startHarness();
    const ready = await h.request("/readyz");
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), {
      ok: true,
      checks: { kv: "ok", delivery: "ok", backlog: "ok" },
    });
    h.service.db.kv.close();
    // The KV check's answer stands for about a second (READY_KV_CACHE_MS).
    let unready = await h.request("/readyz");
    await waitFor(async () => {
      await unready.body?.cancel();
      unready = await h.request("/readyz");
      return unready.status === 503;
    }, { message: "unready once the cached answer expired" });
    const body = await unready.json();
    assert.equal(body.ok, false);
    assert.equal(body.checks.kv, "KV is not writable");
    assert.equal((await h.request("/healthz")).status, 503);
    const metrics = await h.request("/metrics");
    assert.equal(metrics.status, 200, "a scrape still answers");
    assert.match(await metrics.text(), /^formrelay_delivery_engine_running 1$/m);
  });

  await t.step("a scrape still answers when the backlog cannot be read", async () => {
    await using h = await startHarness();
    h.service.db.kv.close();
    const metrics = await h.request("/metrics");
    assert.equal(metrics.status, 200);
    const text = await metrics.text();
    assert.doesNotMatch(text, /^formrelay_jobs\{/m);
    assert.match(text, /^formrelay_delivery_engine_running 1$/m);
  });

  await t.step(
    "unready when the backlog reaches READY_MAX_BACKLOG and no engine delivers",
    async () => {
      await using h = await startHarness({ readyMaxBacklog: 1 }, { deliver: false });
      const form = await h.createForm();
      await h.addDestination(form.id, { type: "webhook", config: { url: "http://127.0.0.1:9/" } });
      assert.equal((await h.submit(form.publicKey, { a: 1 })).status, 202);
      const unready = await h.request("/readyz");
      assert.equal(unready.status, 503);
      assert.deepEqual((await unready.json()).checks, {
        delivery: "Delivery engine is not running",
        backlog: "1 jobs due: at or over READY_MAX_BACKLOG (1)",
      });
    },
  );
});

Deno.test("GET /readyz checks KV at most once at a time and keeps the answer about a second", async () => {
  await using h = await startHarness();
  const kv = h.service.db.kv;
  const set = kv.set.bind(kv);
  let writes = 0;
  kv.set = (...args: Parameters<Deno.Kv["set"]>) => {
    writes++;
    return set(...args);
  };
  const probes = await Promise.all(Array.from({ length: 500 }, () => h.request("/readyz")));
  assert.deepEqual([...new Set(probes.map((r) => r.status))], [200]);
  assert.equal(writes, 1, "500 probes at once share one write");
  // Probes one after another for 2.5 s: a write when the kept answer is a second old.
  let answered = 0;
  const end = performance.now() + 2500;
  while (performance.now() < end) {
    const response = await h.request("/readyz");
    assert.equal(response.status, 200);
    await response.body?.cancel();
    answered++;
  }
  assert.ok(answered > 100, `${answered} probes`);
  assert.ok(writes >= 2 && writes <= 4, `${writes} KV writes for ${answered + 500} probes`);
});

/** A span as Deno's OTLP/HTTP JSON exporter sends it, as far as the test reads it. */
interface OtlpSpan {
  name: string;
  attributes: { key: string; value: Record<string, unknown> }[];
}

function attribute(span: OtlpSpan, key: string): unknown {
  const value = span.attributes.find((a) => a.key === key)?.value;
  return value === undefined ? undefined : Object.values(value)[0];
}

Deno.test("with OTEL_DENO=true the ingestion span and the delivery span share the submission id", async () => {
  const spans: OtlpSpan[] = [];
  const collector = new AbortController();
  const receiver = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: collector.signal, onListen() {} },
    async (request) => {
      const body = await request.json();
      if (new URL(request.url).pathname === "/v1/traces") {
        for (const resource of body.resourceSpans ?? []) {
          for (const scope of resource.scopeSpans ?? []) spans.push(...scope.spans);
        }
      }
      return Response.json({});
    },
  );
  await using sink = startWebhookSink();
  const dir = await Deno.makeTempDir();
  const env = { KV_PATH: `${dir}/formrelay.kv` };
  const setup = await startService(loadConfig({ ...env, LOG_LEVEL: "silent" }), {
    deliver: false,
  });
  const { tenantKey } = await createOrg(setup.db, "Traced org");
  await setup.close();
  const child = await startServiceProcess({
    ...env,
    OTEL_DENO: "true",
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.addr.port}`,
    OTEL_SERVICE_NAME: "formrelay-test",
    // Export spans soon after they end, not every 5 s.
    OTEL_BSP_SCHEDULE_DELAY: "100",
  });
  try {
    const admin = (path: string, body: unknown) =>
      fetch(`${child.origin}/v1/admin${path}`, {
        method: "POST",
        headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
        body: JSON.stringify(body),
      }).then((r) => r.json());
    const { form } = await admin("/forms", { name: "Traced" });
    await admin(`/forms/${form.id}/destinations`, { type: "webhook", config: { url: sink.url } });
    const response = await fetch(`${child.origin}/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ secret: "payload-value" }),
    });
    assert.equal(response.status, 202);
    const { submissionId } = await response.json();
    const withId = () =>
      spans.filter((s) => attribute(s, "formrelay.submission_id") === submissionId);
    await waitFor(() => withId().length >= 2, {
      timeoutMs: 20_000,
      message: () => `spans of the submission: ${JSON.stringify(spans.map((s) => s.name))}`,
    });
    const ingestion = withId().find((s) => s.name === "POST")!;
    const delivery = withId().find((s) => s.name === "formrelay.delivery")!;
    assert.ok(ingestion, "the ingestion request's span");
    assert.ok(delivery, "the delivery attempt's span");
    assert.equal(attribute(delivery, "formrelay.destination_type"), "webhook");
    assert.equal(attribute(delivery, "formrelay.outcome"), "delivered");
    assert.equal(Number(attribute(delivery, "formrelay.status_code")), 200);
    assert.ok(!JSON.stringify(spans).includes("payload-value"), "no payload in spans");
    assert.ok(!JSON.stringify(spans).includes(tenantKey), "no tenant key in spans");
  } finally {
    await child.kill("SIGTERM");
    collector.abort();
    await receiver.finished;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with METRICS_PER_FORM=true the ingestion counters carry the form id", async () => {
  await using h = await startHarness({ metrics: { token: null, perForm: true } });
  const form = await h.createForm();
  await h.addDestination(form.id, { type: "webhook", config: { url: "http://127.0.0.1:9/" } });
  assert.equal((await h.submit(form.publicKey, { a: 1 })).status, 202);
  const text = await scrape(h);
  assert.equal(sample(text, "formrelay_submissions_accepted_total", `form_id="${form.id}"`), 1);
  assert.ok(!text.includes(form.publicKey), "no public key in labels");
});
