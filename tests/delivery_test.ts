import assert from "node:assert/strict";
import { createConnectors } from "../connectors/mod.ts";
import { BURST_PAUSE_MS } from "../delivery/dispatcher.ts";
import { startDeliveryEngine } from "../delivery/engine.ts";
import { createOrg } from "../store/orgs.ts";
import { startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { freePort } from "../tools/ports.ts";
import { type Received, startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

type H = Awaited<ReturnType<typeof startHarness>>;

interface Outcome {
  submissionId: string;
  destinationId: string;
  destinationType: string;
  status: string;
  attempts: number;
  lastError: string | null;
  lastStatusCode: number | null;
}

async function outcomes(h: H, formId: string): Promise<Outcome[]> {
  const response = await h.admin("GET", `/forms/${formId}/deliveries?limit=500`);
  assert.equal(response.status, 200);
  return (await response.json()).deliveries;
}

async function waitForOutcomes(h: H, formId: string, count: number, status?: string) {
  let last: Outcome[] = [];
  await waitFor(async () => {
    last = (await outcomes(h, formId)).filter((o) => o.status !== "retrying");
    return last.length >= count && (status === undefined || last.every((o) => o.status === status));
  }, {
    message: () =>
      `${count} final outcomes: ${
        JSON.stringify(last.map((o) => [o.status, o.attempts, o.lastError]))
      }`,
    timeoutMs: 20_000,
  });
  return last;
}

/**
 * A second delivery engine on the harness's KV: by default as on a KV without queues
 * (sweep only); with `queues`, it also takes in the queue's wake-ups.
 */
function startEngine(
  h: H,
  options: {
    maxWaiting?: number;
    ingestBurstMs?: (orgId: string) => number | null;
    queues?: boolean;
  } = {},
) {
  const connectors = createConnectors(h.config);
  const { maxWaiting, ...rest } = options;
  // The waiting list holds the process's backlog bound.
  const backlog = maxWaiting ? { maxJobs: maxWaiting, orgShare: 1 } : h.config.backlog;
  const engine = startDeliveryEngine({
    db: h.service.db,
    connectors,
    config: { ...h.config, backlog },
    logger: h.service.logger,
    queues: false,
    ...rest,
  });
  return {
    stats: engine.stats,
    async close() {
      await engine.close();
      connectors.close();
    },
  };
}

const webhook = (url: string, extra: Record<string, unknown> = {}) => ({
  type: "webhook",
  config: { url, ...extra },
});

Deno.test("a submission reaches two webhooks and a spreadsheet app that redirects, once each", async () => {
  await using h = await startHarness();
  await using first = startWebhookSink();
  await using second = startWebhookSink();
  // A script web app: POST runs the script, then 302 to a URL that must be fetched with GET.
  await using sheet = startWebhookSink((received) => {
    if (received.method === "POST") {
      return new Response(null, { status: 302, headers: { location: "/echo?user_content_key=k" } });
    }
    return Response.json({ ok: true });
  });
  const sheetPosts: Received[] = [];
  const form = await h.createForm({ name: "Contact" });
  const ids = [
    await h.addDestination(form.id, webhook(first.url, { headers: { "X-Secret": "s1" } })),
    await h.addDestination(form.id, webhook(second.url, { method: "PUT" })),
    await h.addDestination(form.id, {
      type: "sheets_webhook",
      config: { url: sheet.url, authHeader: "Bearer sheet-token" },
    }),
  ];
  const response = await h.submit(form.publicKey, { name: "Ada", email: "ada@example.com" });
  assert.equal(response.status, 202);
  const { submissionId } = await response.json();
  const done = await waitForOutcomes(h, form.id, 3, "delivered");
  assert.deepEqual(done.map((o) => o.destinationId).sort(), [...ids].sort());
  assert.equal(first.received.length, 1);
  assert.equal(second.received.length, 1);
  const hook = first.received[0];
  assert.equal(hook.method, "POST");
  assert.equal(hook.headers.get("x-secret"), "s1");
  assert.equal(hook.headers.get("content-type"), "application/json");
  assert.match(hook.headers.get("user-agent") ?? "", /^formrelay\/\d+\.\d+\.\d+$/);
  assert.equal(hook.headers.get("webhook-id"), `${submissionId}.${ids[0]}`);
  assert.equal(hook.json?.submissionId, submissionId);
  assert.deepEqual(hook.json?.payload, { name: "Ada", email: "ada@example.com" });
  assert.equal(hook.json?.formName, "Contact");
  assert.equal(second.received[0].method, "PUT");
  // The spreadsheet app saw the POST with the envelope, then the GET of the redirect.
  assert.equal(sheet.hits, 2);
  for (const r of sheet.received) sheetPosts.push(r);
  assert.equal(sheetPosts.at(-1)?.method, "GET");
  assert.equal(
    await countKeys(h.service.db.kv, "envelopes"),
    0,
    "envelope deleted after the last delivery",
  );
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 0);
});

Deno.test("sibling jobs delivered side by side clean up their envelope in their own commits, with no check after", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(`${sink.url}/a`));
  await h.addDestination(form.id, webhook(`${sink.url}/b`));
  // Envelope check markers (envelope_cleanup.ts) set by the service's commits: a job sets
  // one when it cannot tell whether a sibling still has to end.
  let markers = 0;
  const { db } = h.service;
  const { batcher } = db;
  db.batcher = {
    sender: batcher.sender,
    commit: (part) =>
      batcher.commit({
        ...part,
        apply(op) {
          const set = op.set;
          op.set = function (key, ...rest) {
            if (key[0] === "envelope_checks") markers++;
            return set.call(this, key, ...rest);
          };
          try {
            part.apply(op);
          } finally {
            delete (op as { set?: unknown }).set;
          }
        },
      }),
  };
  const submissions = 30;
  for (let i = 0; i < submissions; i++) {
    assert.equal((await h.submit(form.publicKey, { i })).status, 202);
  }
  await waitForOutcomes(h, form.id, 2 * submissions, "delivered");
  await waitFor(async () => await countKeys(db.kv, "envelopes") === 0, {
    message: "every envelope deleted",
  });
  assert.equal(sink.received.length, 2 * submissions);
  assert.equal(markers, 0, "each job left the envelope to a sibling held here or deleted it");
});

Deno.test("a destination answering 500 three times then 200 is delivered once after 4 attempts", async () => {
  await using h = await startHarness({ retryScheduleMs: [30, 30, 30, 30] });
  await using sink = startWebhookSink((_, hit) =>
    hit <= 3 ? new Response("down", { status: 500 }) : new Response("ok")
  );
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  const [outcome] = await waitForOutcomes(h, form.id, 1);
  assert.equal(outcome.status, "delivered");
  assert.equal(outcome.attempts, 4);
  assert.equal(sink.hits, 4);
  assert.equal(sink.received.length, 1);
  const ids = new Set(sink.received.map((r) => r.headers.get("webhook-id")));
  assert.equal(ids.size, 1);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 0);
  // Put back after its first attempt, it was indexed; it ended with its entry deleted.
  assert.equal(await countKeys(h.service.db.kv, "jobs_by_destination"), 0);
});

Deno.test("webhook-id is stable across retries", async () => {
  await using h = await startHarness({ retryScheduleMs: [20, 20] });
  const seen: string[] = [];
  await using sink = startWebhookSink((received, hit) => {
    seen.push(received.headers.get("webhook-id")!);
    return hit === 1 ? new Response("busy", { status: 503 }) : new Response("ok");
  });
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  await waitForOutcomes(h, form.id, 1, "delivered");
  assert.equal(seen.length, 2);
  assert.equal(seen[0], seen[1]);
});

Deno.test("a 400 fails at once without retry, and the envelope is deleted", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink(() => new Response("bad", { status: 400 }));
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  const [outcome] = await waitForOutcomes(h, form.id, 1);
  assert.equal(outcome.status, "failed");
  assert.equal(outcome.attempts, 1);
  assert.equal(outcome.lastStatusCode, 400);
  assert.match(outcome.lastError ?? "", /400/);
  assert.equal(sink.hits, 1);
  assert.equal(
    await countKeys(h.service.db.kv, "envelopes"),
    0,
    "no envelope chunk after final failure",
  );
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 0);
});

Deno.test("transient failures stop when the schedule is exhausted", async () => {
  await using h = await startHarness({ retryScheduleMs: [10, 10] });
  await using sink = startWebhookSink(() => new Response("down", { status: 502 }));
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  const [outcome] = await waitForOutcomes(h, form.id, 1);
  assert.equal(outcome.status, "failed");
  assert.equal(outcome.attempts, 3);
  assert.match(outcome.lastError ?? "", /Retries exhausted after 3 attempts/);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 0);
});

Deno.test("Retry-After is honoured", async () => {
  await using h = await startHarness({ retryScheduleMs: [10, 10] });
  const times: number[] = [];
  await using sink = startWebhookSink((_, hit) => {
    times.push(Date.now());
    return hit === 1
      ? new Response("later", { status: 429, headers: { "retry-after": "1" } })
      : new Response("ok");
  });
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  await waitForOutcomes(h, form.id, 1, "delivered");
  assert.ok(times[1] - times[0] >= 1000, `retried after ${times[1] - times[0]} ms`);
});

Deno.test("a receiver that is down and comes back gets the submission", async () => {
  await using h = await startHarness({ retryScheduleMs: [50, 50, 50, 50, 50, 50] });
  const port = freePort();
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(`http://127.0.0.1:${port}/hook`));
  await h.submit(form.publicKey, { a: 1 });
  await waitFor(async () => (await outcomes(h, form.id)).some((o) => o.attempts >= 2), {
    message: "two refused attempts",
  });
  await using sink = startWebhookSink(undefined, { port });
  const [outcome] = await waitForOutcomes(h, form.id, 1);
  assert.equal(outcome.status, "delivered");
  assert.ok(outcome.attempts >= 3);
  assert.equal(sink.received.length, 1);
});

Deno.test("a disabled destination receives nothing; the enabled one everything", async () => {
  await using h = await startHarness();
  await using on = startWebhookSink();
  await using off = startWebhookSink();
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(on.url));
  await h.addDestination(form.id, { ...webhook(off.url), isEnabled: false });
  for (let i = 0; i < 5; i++) assert.equal((await h.submit(form.publicKey, { i })).status, 202);
  await waitForOutcomes(h, form.id, 5, "delivered");
  assert.equal(on.received.length, 5);
  assert.equal(off.hits, 0);
});

Deno.test("a slow destination does not delay or stop another", async () => {
  await using h = await startHarness({ deliveryConcurrency: 4 });
  let release!: () => void;
  const released = new Promise<void>((resolve) => release = resolve);
  await using slow = startWebhookSink(async () => {
    await released;
    return new Response("finally");
  });
  await using fast = startWebhookSink();
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(slow.url));
  await h.addDestination(form.id, webhook(fast.url));
  for (let i = 0; i < 20; i++) await h.submit(form.publicKey, { i });
  try {
    await waitFor(() => fast.received.length === 20, { message: "all 20 at the fast sink" });
    assert.ok(slow.received.length === 0);
    // 4 slots, an organization's share half of them, a destination half of that.
    assert.equal(slow.hits, 1, "the slow destination holds at most half its organization's share");
  } finally {
    release();
  }
  await waitForOutcomes(h, form.id, 40, "delivered");
  assert.equal(slow.received.length, 20);
});

Deno.test("deliveries run under the configured concurrency", async () => {
  // One organization here: uncapped, so that the bound is the concurrency's.
  await using h = await startHarness({ deliveryConcurrency: 2, deliveryOrgShare: 1 });
  let release!: () => void;
  const released = new Promise<void>((resolve) => release = resolve);
  await using a = startWebhookSink(async () => {
    await released;
    return new Response("ok");
  });
  await using b = startWebhookSink(async () => {
    await released;
    return new Response("ok");
  });
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(a.url));
  await h.addDestination(form.id, webhook(b.url));
  for (let i = 0; i < 5; i++) await h.submit(form.publicKey, { i });
  try {
    await waitFor(() => a.hits + b.hits === 2, { message: "two deliveries started" });
    assert.deepEqual(h.service.engine!.stats(), { active: 2, waiting: 8 });
  } finally {
    release();
  }
  await waitForOutcomes(h, form.id, 10, "delivered");
  assert.equal(a.received.length + b.received.length, 10);
});

Deno.test("a handler that takes longer than 5 s is not sent twice", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink(async () => {
    // A slow receiver: well past the KV queue's ~5 s redelivery threshold.
    await new Promise((resolve) => setTimeout(resolve, 6500));
    return new Response("ok");
  });
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  const [outcome] = await waitForOutcomes(h, form.id, 1);
  assert.equal(outcome.status, "delivered");
  assert.equal(outcome.attempts, 1);
  assert.equal(sink.hits, 1);
  // A wake-up arriving now finds nothing to do.
  h.service.engine!.wake([{
    submittedAt: Date.parse((outcome as unknown as { submittedAt: string }).submittedAt),
    submissionId: outcome.submissionId,
    destinationId: outcome.destinationId,
    orgId: h.orgId,
  }]);
  await h.service.engine!.sweep();
  assert.equal(sink.hits, 1);
});

Deno.test("a second wake-up while the lease holds does nothing", async () => {
  await using h = await startHarness({}, { deliver: false });
  const { claimJob } = await import("../store/jobs.ts");
  const form = await h.createForm();
  const destinationId = await h.addDestination(form.id, webhook("https://hooks.example.com/x"));
  const { submissionId } = await (await h.submit(form.publicKey, { a: 1 })).json();
  let submittedAt = 0;
  for await (const entry of h.service.db.kv.list({ prefix: ["jobs"] })) {
    submittedAt = entry.key[1] as number;
  }
  const ref = { submittedAt, submissionId, destinationId };
  const now = Date.now();
  const first = await claimJob(h.service.db, ref, { now, leaseMs: 60_000 });
  assert.ok(first);
  assert.equal(first.job.state, "in_flight");
  assert.equal(first.job.attempts, 1);
  assert.equal(await claimJob(h.service.db, ref, { now: now + 1000, leaseMs: 60_000 }), null);
  const concurrent = await Promise.all(
    [1, 2, 3].map(() => claimJob(h.service.db, ref, { now: now + 61_000, leaseMs: 60_000 })),
  );
  assert.equal(
    concurrent.filter((c) => c !== null).length,
    1,
    "one claim of an expired lease wins",
  );
});

Deno.test("on a KV without queues the sweep alone delivers every job", async () => {
  // Accepted by a process that does not deliver: no queue message, no local wake-up.
  await using h = await startHarness({ sweepIntervalMs: 100, retryScheduleMs: [20, 20, 20] }, {
    queues: false,
    deliver: false,
  });
  // The first few answers are 503, so retries go through the sweep-only path too.
  await using sink = startWebhookSink((_, hit) =>
    hit <= 3 ? new Response("busy", { status: 503 }) : new Response("ok")
  );
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  await h.addDestination(form.id, webhook(sink.url.replace("/hook", "/other")));
  const ids = new Set<string>();
  for (let i = 0; i < 10; i++) {
    ids.add((await (await h.submit(form.publicKey, { i })).json()).submissionId);
  }
  assert.equal(sink.hits, 0);
  const engine = startEngine(h);
  try {
    await waitForOutcomes(h, form.id, 20, "delivered");
  } finally {
    await engine.close();
  }
  const delivered = new Set(sink.received.map((r) => r.json?.submissionId as string));
  assert.deepEqual(delivered, ids);
  assert.equal(sink.received.length, 20);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 0);
});

Deno.test("GET /forms/:id/deliveries lists outcomes without payloads", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const marker = `MARKER-${crypto.randomUUID()}`;
  const form = await h.createForm();
  const destinationId = await h.addDestination(form.id, webhook(sink.url));
  const { submissionId } = await (await h.submit(form.publicKey, { note: marker })).json();
  await waitForOutcomes(h, form.id, 1, "delivered");
  const response = await h.admin("GET", `/forms/${form.id}/deliveries`);
  const text = await response.text();
  assert.ok(!text.includes(marker));
  const { deliveries } = JSON.parse(text);
  assert.equal(deliveries.length, 1);
  assert.deepEqual(
    { ...deliveries[0], submittedAt: undefined, updatedAt: undefined },
    {
      deliveryId: `${submissionId}.${destinationId}`,
      submissionId,
      destinationId,
      destinationType: "webhook",
      status: "delivered",
      attempts: 1,
      lastError: null,
      lastStatusCode: 200,
      detail: null,
      submittedAt: undefined,
      updatedAt: undefined,
      nextAttemptAt: null,
    },
  );
  const bad = await h.admin("GET", `/forms/${form.id}/deliveries?limit=0`);
  assert.equal(bad.status, 400);
  assert.ok(!h.logs.join("\n").includes(marker), "no payload in logs");
});

Deno.test("a destination deleted before its delivery fails the job without sending", async () => {
  await using h = await startHarness({}, { deliver: false });
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const destinationId = await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { a: 1 });
  await h.admin("DELETE", `/forms/${form.id}/destinations/${destinationId}`);
  const engine = startEngine(h);
  try {
    const [outcome] = await waitForOutcomes(h, form.id, 1);
    assert.equal(outcome.status, "failed");
    assert.match(outcome.lastError ?? "", /deleted/);
    assert.equal(sink.hits, 0);
    assert.equal(await countKeys(h.service.db.kv, "envelopes"), 0);
  } finally {
    await engine.close();
  }
});

/**
 * A harness that neither delivers nor sweeps by itself within a test, with a form whose
 * one webhook hangs until released: for engines started by the test.
 */
async function startHangingBacklog() {
  const h = await startHarness({ deliveryConcurrency: 2, sweepIntervalMs: 60_000 }, {
    deliver: false,
  });
  let release!: () => void;
  const released = new Promise<void>((resolve) => release = resolve);
  const sink = startWebhookSink(async () => {
    await released;
    return new Response("ok");
  });
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  return {
    h,
    sink,
    form,
    release,
    async [Symbol.asyncDispose]() {
      release();
      await sink[Symbol.asyncDispose]();
      await h[Symbol.asyncDispose]();
    },
  };
}

Deno.test("a backlog beyond the in-memory bound waits in KV and is all delivered", async () => {
  await using backlog = await startHangingBacklog();
  const { h, sink, form, release } = backlog;
  for (let i = 0; i < 30; i++) assert.equal((await h.submit(form.publicKey, { i })).status, 202);
  const engine = startEngine(h, { maxWaiting: 5 });
  try {
    await waitFor(() => sink.hits === 1, { message: "the first delivery started" });
    // The sweep took in 5 of the 30 due jobs; one runs (one slot per destination).
    assert.deepEqual(engine.stats(), { active: 1, waiting: 4 }, "the rest stays in KV");
    release();
    const done = await waitForOutcomes(h, form.id, 30, "delivered");
    assert.equal(done.length, 30);
    assert.equal(sink.received.length, 30);
  } finally {
    release();
    await engine.close();
  }
});

Deno.test("queue wake-ups past the in-memory bound are left to the sweep, and all delivered", async () => {
  // No interval sweep during the test: only the engine's own catch-up can bring them in.
  await using backlog = await startHangingBacklog();
  const { h, sink, form, release } = backlog;
  const engine = startEngine(h, { maxWaiting: 5, queues: true });
  try {
    assert.equal((await h.submit(form.publicKey, { first: true })).status, 202);
    await waitFor(() => sink.hits === 1, { message: "the first delivery started" });
    // Every later submission's wake-up finds the waiting list full.
    for (let i = 0; i < 30; i++) assert.equal((await h.submit(form.publicKey, { i })).status, 202);
    await waitFor(() => engine.stats().waiting === 5, { message: "the waiting list filled" });
    assert.equal(sink.hits, 1);
    release();
    const done = await waitForOutcomes(h, form.id, 31, "delivered");
    assert.equal(done.length, 31);
    assert.equal(sink.received.length, 31);
  } finally {
    release();
    await engine.close();
  }
});

Deno.test("a burst on one organization's forms holds its deliveries back for the pause only, and no one else's", async () => {
  await using h = await startHarness({
    deliveryConcurrency: 8,
    deliveryOrgShare: 1,
    sweepIntervalMs: 60_000,
  }, {
    deliver: false,
  });
  await using sink = startWebhookSink();
  const flooded = await h.createForm();
  await h.addDestination(flooded.id, webhook(sink.url + "/flooded"));
  // A second tenant, with a form of its own.
  const { tenantKey } = await createOrg(h.service.db, "Other org");
  const other = (await (await h.admin("POST", "/forms", { name: "Other" }, { tenantKey })).json())
    .form;
  await h.admin("POST", `/forms/${other.id}/destinations`, webhook(sink.url + "/other"), {
    tenantKey,
  });
  for (let i = 0; i < 10; i++) assert.equal((await h.submit(flooded.publicKey, { i })).status, 202);
  assert.equal((await h.submit(other.publicKey, { i: 0 })).status, 202);
  let burstMs: number | null = 1_000;
  const engine = startEngine(h, {
    ingestBurstMs: (orgId) => orgId === h.orgId ? burstMs : null,
  });
  try {
    // Its answer back too: the sink counts a hit before it answers.
    await waitFor(() => sink.hits === 1 && engine.stats().active === 0, {
      message: "the other organization's delivery ran",
    });
    assert.deepEqual(sink.received.map((r) => r.path), ["/hook/other"]);
    assert.deepEqual(engine.stats(), { active: 0, waiting: 10 }, "none of the burst's starts");
    // A flood that outlasts the pause delivers as usual, with every slot it may hold.
    burstMs = BURST_PAUSE_MS;
    const done = await waitForOutcomes(h, flooded.id, 10, "delivered");
    assert.equal(done.length, 10);
    assert.equal(sink.received.length, 11);
  } finally {
    await engine.close();
  }
});
