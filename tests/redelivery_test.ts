import assert from "node:assert/strict";
import type { FailingRecord } from "../store/destination_health.ts";
import { destinationFailingKey } from "../store/keys.ts";
import {
  destinationView,
  outcomeViews,
  storedJobs,
  submitAndSettle,
  switchableSink,
  webhook,
} from "./helpers/deliveries.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

function redeliverOne(h: Harness, formId: string, submissionId: string, destinationId: string) {
  return h.admin("POST", `/forms/${formId}/deliveries/${submissionId}.${destinationId}/redeliver`);
}

/** Pauses a destination whose receiver fails: two failures the (1 ms) span apart. */
async function pause(h: Harness, formId: string, publicKey: string, id: string) {
  await submitAndSettle(h, publicKey);
  const key = destinationFailingKey(id);
  await waitFor(async () => (await h.service.db.kv.get<FailingRecord>(key)).value !== null);
  await submitAndSettle(h, publicKey);
  await waitFor(async () => (await destinationView(h, formId, id)).health.state === "paused", {
    message: "paused",
  });
}

Deno.test("redelivering one held delivery sends it while the destination stays paused", async () => {
  await using h = await startHarness({ pauseAfterMs: 1, retryScheduleMs: [] });
  const { sink, state } = switchableSink(500);
  await using _sink = sink;
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  await pause(h, form.id, form.publicKey, id);
  const first = await submitAndSettle(h, form.publicKey, { name: "first" });
  const second = await submitAndSettle(h, form.publicKey, { name: "second" });

  // All since a time needs a resume first; one delivery by name goes through (a probe).
  const bulk = await h.admin("POST", `/forms/${form.id}/destinations/${id}/redeliver`, {
    since: new Date(0).toISOString(),
  });
  assert.equal(bulk.status, 409);
  assert.match((await bulk.json()).error, /^Destination is paused: resume it/);

  state.failing = false;
  const response = await redeliverOne(h, form.id, first, id);
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), { ok: true, redelivered: 1 });
  await waitFor(() => sink.received.length === 1, { message: "delivered" });
  assert.equal(sink.received[0].json?.submissionId, first);
  assert.deepEqual(sink.received[0].json?.payload, { name: "first" });
  await waitFor(async () => (await storedJobs(h)).length === 1, { message: "one job left" });
  const outcomes = await outcomeViews(h, form.id);
  assert.equal(outcomes.find((o) => o.submissionId === first)?.status, "delivered");
  assert.equal(outcomes.find((o) => o.submissionId === second)?.status, "held");
  assert.equal((await destinationView(h, form.id, id)).health.state, "paused");

  // Delivered: its data is gone, so a second redelivery is refused.
  const again = await redeliverOne(h, form.id, first, id);
  assert.equal(again.status, 409);
  assert.match((await again.json()).error, /no longer held.*FAILED_RETENTION_HOURS=0/);
});

Deno.test("a failed delivery retained by FAILED_RETENTION_HOURS is redelivered, one or all since a time", async () => {
  await using h = await startHarness({
    pauseAfterMs: 0,
    retryScheduleMs: [],
    failedRetentionMs: 3600_000,
  });
  const { sink, state } = switchableSink(400);
  await using _sink = sink;
  await using other = startWebhookSink();
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  await h.addDestination(form.id, webhook(other.url));
  const a = await submitAndSettle(h, form.publicKey, { name: "a" });
  const b = await submitAndSettle(h, form.publicKey, { name: "b" });
  const c = await submitAndSettle(h, form.publicKey, { name: "c" });
  assert.equal(other.received.length, 3);
  const failed = (await outcomeViews(h, form.id)).filter((o) => o.destinationId === id);
  assert.deepEqual(failed.map((o) => o.status), ["failed", "failed", "failed"]);
  // Kept: the three records and their sealed envelopes (never in plaintext).
  await waitFor(async () => await countKeys(h.service.db.kv, "envelope_checks") === 0);
  assert.equal(await countKeys(h.service.db.kv, "retained"), 3);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 3);

  state.failing = false;
  const one = await redeliverOne(h, form.id, a, id);
  assert.equal(one.status, 200);
  await waitFor(() => sink.received.length === 1, { message: "a delivered" });
  assert.deepEqual(sink.received[0].json?.payload, { name: "a" });
  await waitFor(async () => await countKeys(h.service.db.kv, "jobs") === 0, { message: "a done" });

  const since = await submittedAt(h, form.id, b);
  const bulk = await h.admin("POST", `/forms/${form.id}/destinations/${id}/redeliver`, { since });
  assert.equal(bulk.status, 200);
  assert.deepEqual(await bulk.json(), { ok: true, redelivered: 2, underWay: 0, expired: 0 });
  await waitFor(() => sink.received.length === 3, { message: "b and c delivered" });
  assert.equal(sink.received[0].json?.submissionId, a);
  assert.deepEqual(
    sink.received.slice(1).map((r) => r.json?.submissionId).sort(),
    [b, c].sort(),
  );
  // Delivered now: nothing retained, every envelope gone.
  await waitFor(async () =>
    await countKeys(h.service.db.kv, "jobs") === 0 &&
    await countKeys(h.service.db.kv, "envelope_checks") === 0
  );
  assert.equal(await countKeys(h.service.db.kv, "retained"), 0);
  assert.equal(await countKeys(h.service.db.kv, "envelopes"), 0);
  const statuses = (await outcomeViews(h, form.id)).filter((o) => o.destinationId === id)
    .map((o) => o.status);
  assert.deepEqual(statuses, ["delivered", "delivered", "delivered"]);
});

/** The acceptance time of a submission, as its outcome shows it. */
async function submittedAt(h: Harness, formId: string, submissionId: string): Promise<string> {
  const response = await h.admin("GET", `/forms/${formId}/deliveries?limit=500`);
  const { deliveries } = await response.json();
  const found = deliveries.find((d: { submissionId: string }) => d.submissionId === submissionId);
  assert.ok(found);
  return found.submittedAt;
}

Deno.test("with retention off a failed delivery's data is deleted and redelivery answers 409", async () => {
  await using h = await startHarness({ pauseAfterMs: 0, retryScheduleMs: [] });
  await using sink = startWebhookSink(() => new Response("no", { status: 422 }));
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  const submissionId = await submitAndSettle(h, form.publicKey);
  await waitFor(async () => await countKeys(h.service.db.kv, "envelopes") === 0, {
    message: "envelope deleted",
  });
  assert.equal(await countKeys(h.service.db.kv, "retained"), 0);

  const response = await redeliverOne(h, form.id, submissionId, id);
  assert.equal(response.status, 409);
  assert.deepEqual(await response.json(), {
    ok: false,
    error: "The submission's data is no longer held: failed submissions are not retained " +
      "on this service (FAILED_RETENTION_HOURS=0)",
  });
  const bulk = await h.admin("POST", `/forms/${form.id}/destinations/${id}/redeliver`, {
    since: new Date(0).toISOString(),
  });
  assert.equal(bulk.status, 200);
  assert.deepEqual(await bulk.json(), { ok: true, redelivered: 0, underWay: 0, expired: 0 });
  assert.equal(sink.hits, 1);
});

Deno.test("redelivery routes answer 404 for unknown deliveries and destinations, 400 for a bad since", async () => {
  await using h = await startHarness();
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook("http://127.0.0.1:9/hook"));
  const cases: [string, unknown, number, string][] = [
    [`/forms/${form.id}/deliveries/not-an-id/redeliver`, undefined, 404, "Delivery not found"],
    [
      `/forms/${form.id}/deliveries/${crypto.randomUUID()}.${crypto.randomUUID()}/redeliver`,
      undefined,
      404,
      "Delivery not found",
    ],
    [
      `/forms/${form.id}/destinations/${crypto.randomUUID()}/redeliver`,
      { since: new Date().toISOString() },
      404,
      "Destination not found",
    ],
    [
      `/forms/${form.id}/destinations/${id}/redeliver`,
      { since: "yesterday" },
      400,
      "Validation error",
    ],
    [`/forms/${crypto.randomUUID()}/destinations/${id}/resume`, undefined, 404, "Form not found"],
    [
      `/forms/${form.id}/destinations/${crypto.randomUUID()}/resume`,
      undefined,
      404,
      "Destination not found",
    ],
  ];
  for (const [path, body, status, error] of cases) {
    const response = await h.admin("POST", path, body);
    assert.equal(response.status, status, path);
    assert.equal((await response.json()).error, error, path);
  }
});

Deno.test("resume, redelivery and destination changes are limited per organization: 429 with Retry-After", async () => {
  await using h = await startHarness({ adminOperationsPerOrg: 4 });
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook("https://hooks.example.com/in"));
  const base = `/forms/${form.id}/destinations/${id}`;
  const calls: [string, string, unknown?][] = [
    ["POST", `${base}/resume`],
    ["POST", `${base}/redeliver`, { since: new Date(0).toISOString() }],
    ["POST", `/forms/${form.id}/deliveries/${crypto.randomUUID()}.${id}/redeliver`],
    ["PATCH", base, { isEnabled: true }],
    ["POST", `${base}/resume`],
    ["DELETE", base],
  ];
  const statuses = [];
  for (const [method, path, body] of calls) {
    const response = await h.admin(method, path, body);
    statuses.push(response.status);
    if (response.status !== 429) {
      await response.body?.cancel();
      continue;
    }
    const retryAfter = Number(response.headers.get("retry-after"));
    assert.ok(retryAfter >= 1 && retryAfter <= 15, `Retry-After ${retryAfter}`);
    assert.deepEqual(await response.json(), {
      ok: false,
      error: "Too many requests: try again later",
      retryAfter,
    });
  }
  // The unknown delivery is a 409 (not held): it still counted.
  assert.deepEqual(statuses, [200, 200, 409, 200, 429, 429]);
  // Reading is not limited.
  assert.equal((await h.admin("GET", `/forms/${form.id}/destinations`)).status, 200);
});
