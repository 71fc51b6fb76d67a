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
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

async function failing(h: Harness, destinationId: string): Promise<FailingRecord | null> {
  return (await h.service.db.kv.get<FailingRecord>(destinationFailingKey(destinationId))).value;
}

/** The failing record, once the health hook has written it (it runs after the outcome). */
async function failingSoon(h: Harness, destinationId: string): Promise<FailingRecord> {
  await waitFor(async () => await failing(h, destinationId) !== null, { message: "failing" });
  return (await failing(h, destinationId))!;
}

/** Waits until `ms` have passed since `since` (the pause span under test). */
async function spanPassed(since: number, ms: number) {
  await waitFor(() => Date.now() - since >= ms, { message: `${ms} ms since ${since}` });
}

const PATH_MARKER = "PATHSECRET7731";

Deno.test("ten junk posts refused with 422 leave the destination healthy; the next real submission is delivered", async () => {
  // The shortest span: were a 422 counted, the second would pause the destination.
  await using h = await startHarness({ pauseAfterMs: 1, retryScheduleMs: [] });
  await using sink = startWebhookSink((received) =>
    typeof received.json?.payload === "object" && received.json.payload !== null &&
      "name" in received.json.payload
      ? new Response("ok")
      : new Response("name is required", { status: 422 })
  );
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));

  for (let i = 0; i < 10; i++) await submitAndSettle(h, form.publicKey, { junk: i });
  const real = await submitAndSettle(h, form.publicKey, { name: "Ada" });

  assert.equal(sink.hits, 11);
  assert.deepEqual(sink.received.map((r) => r.json?.submissionId), [real]);
  const outcomes = await outcomeViews(h, form.id);
  assert.deepEqual(outcomes.map((o) => o.status).sort(), [
    "delivered",
    ...Array(10).fill("failed"),
  ]);
  const view = await destinationView(h, form.id, id);
  assert.equal(view.isEnabled, true);
  assert.deepEqual(view.health, { state: "healthy", reason: null, since: null });
  assert.equal(await failing(h, id), null);
});

Deno.test("a destination failing by its own fault over the span is paused; later submissions are held, then delivered once on resume", async () => {
  const spanMs = 300;
  await using h = await startHarness({ pauseAfterMs: spanMs, retryScheduleMs: [] });
  const { sink, state } = switchableSink(503);
  await using _sink = sink;
  await using healthy = startWebhookSink();
  const form = await h.createForm();
  const url = `${sink.url}/${PATH_MARKER}?token=${PATH_MARKER}`;
  const id = await h.addDestination(form.id, webhook(url));
  await h.addDestination(form.id, webhook(healthy.url));

  await submitAndSettle(h, form.publicKey);
  const first = await failingSoon(h, id);
  assert.equal((await destinationView(h, form.id, id)).health.state, "healthy", "span not over");

  await spanPassed(first.since, spanMs);
  await submitAndSettle(h, form.publicKey);
  await waitFor(async () => (await destinationView(h, form.id, id)).health.state === "paused", {
    message: "paused",
  });
  const paused = await destinationView(h, form.id, id);
  assert.equal(paused.isEnabled, true, "the tenant's switch is untouched");
  assert.match(
    paused.health.reason ?? "",
    /^Failing since \S+ with no delivery in between \(2 failed attempts\); last error: Cannot deliver to "http:\/\/127\.0\.0\.1:\d+": 503 Service Unavailable$/,
  );
  assert.ok(!(paused.health.reason ?? "").includes(PATH_MARKER), "no URL path in the reason");
  assert.ok(Date.parse(paused.health.since ?? "") >= first.since + spanMs);
  assert.ok(!("disabledReason" in paused), "no field of earlier versions repeats it");
  // Delivery and pause log lines say whose, where and why; never the URL's secret path.
  const logged = (msg: string) =>
    h.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === msg);
  await waitFor(() => logged("destination paused").length === 1, { message: "pause logged" });
  const [pauseLine] = logged("destination paused");
  assert.equal(pauseLine.orgId, h.orgId);
  assert.equal(pauseLine.formId, form.id);
  assert.equal(pauseLine.destinationId, id);
  assert.match(pauseLine.reason, /^failing by its own fault for .* h; last error: .*503/);
  const failed = logged("delivery attempt").find((entry) => entry.destinationId === id);
  assert.equal(failed.orgId, h.orgId);
  assert.equal(failed.formId, form.id);
  assert.match(failed.reason, /503 Service Unavailable/);
  assert.ok(!h.logs.some((line) => line.includes(PATH_MARKER)), "no URL path or query logged");

  // Paused: accepted submissions are held for it, visible as held, and not attempted.
  const held = [
    await submitAndSettle(h, form.publicKey, { name: "held 1" }),
    await submitAndSettle(h, form.publicKey, { name: "held 2" }),
  ];
  assert.equal(sink.hits, 2);
  assert.equal(healthy.received.length, 4, "the other destination keeps receiving");
  const heldOutcomes = (await outcomeViews(h, form.id))
    .filter((o) => o.destinationId === id && held.includes(o.submissionId));
  assert.deepEqual(heldOutcomes.map((o) => o.status), ["held", "held"]);
  assert.deepEqual(
    (await storedJobs(h)).map((j) => [j.submissionId, j.state]).sort(),
    [
      [held[0], "held"],
      [held[1], "held"],
    ].sort(),
  );

  state.failing = false;
  const response = await h.admin("POST", `/forms/${form.id}/destinations/${id}/resume`);
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.released, 2);
  assert.deepEqual(body.destination.health, { state: "healthy", reason: null, since: null });
  await waitFor(() => sink.received.length === 2, { message: "held submissions delivered" });
  await waitFor(async () => (await storedJobs(h)).length === 0, { message: "jobs done" });
  assert.deepEqual(sink.received.map((r) => r.json?.submissionId).sort(), [...held].sort());
  const after = (await outcomeViews(h, form.id))
    .filter((o) => o.destinationId === id && held.includes(o.submissionId));
  assert.deepEqual(after.map((o) => o.status), ["delivered", "delivered"]);
  assert.equal(await failing(h, id), null, "resuming starts the span afresh");
  // A sweep finds nothing more to send: each was delivered once.
  assert.equal(await h.service.engine!.sweep(), 0);
  assert.equal(sink.hits, 4);
});

Deno.test("failures over the span with a delivery in between do not pause", async () => {
  const spanMs = 200;
  await using h = await startHarness({ pauseAfterMs: spanMs, retryScheduleMs: [] });
  const { sink, state } = switchableSink(500);
  await using _sink = sink;
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));

  await submitAndSettle(h, form.publicKey);
  const first = await failingSoon(h, id);
  await spanPassed(first.since, spanMs);
  state.failing = false;
  await submitAndSettle(h, form.publicKey);
  await waitFor(async () => await failing(h, id) === null, { message: "cleared by a delivery" });
  state.failing = true;
  await submitAndSettle(h, form.publicKey);
  await waitFor(async () => (await failing(h, id)) !== null, { message: "a new span" });
  const view = await destinationView(h, form.id, id);
  assert.equal(view.health.state, "healthy");
  assert.equal((await failing(h, id))?.failures, 1);
});

Deno.test("a destination the tenant disabled gets no jobs and no outcomes", async () => {
  await using h = await startHarness({ retryScheduleMs: [] });
  await using off = startWebhookSink();
  await using on = startWebhookSink();
  const form = await h.createForm();
  const offId = await h.addDestination(form.id, { ...webhook(off.url), isEnabled: false });
  const onId = await h.addDestination(form.id, webhook(on.url));
  const submissionId = await submitAndSettle(h, form.publicKey);
  assert.equal(off.hits, 0);
  assert.equal(on.received.length, 1);
  const outcomes = await outcomeViews(h, form.id);
  assert.deepEqual(outcomes.map((o) => [o.submissionId, o.destinationId, o.status]), [
    [submissionId, onId, "delivered"],
  ]);
  assert.ok(!outcomes.some((o) => o.destinationId === offId));
});

Deno.test("disabling a paused destination ends its held jobs as failed; enabling resumes it", async () => {
  await using h = await startHarness({ pauseAfterMs: 1, retryScheduleMs: [] });
  const { sink, state } = switchableSink(401);
  await using _sink = sink;
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  await submitAndSettle(h, form.publicKey);
  const first = await failingSoon(h, id);
  await spanPassed(first.since, 1);
  await submitAndSettle(h, form.publicKey);
  await waitFor(async () => (await destinationView(h, form.id, id)).health.state === "paused", {
    message: "paused",
  });
  const held = await submitAndSettle(h, form.publicKey);

  const off = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, { isEnabled: false });
  assert.equal(off.status, 200);
  await waitFor(async () => (await storedJobs(h)).length === 0, { message: "held job ended" });
  const ended = (await outcomeViews(h, form.id)).find((o) => o.submissionId === held);
  assert.equal(ended?.status, "failed");
  assert.equal(ended?.lastError, "Destination was disabled before delivery");
  assert.equal(sink.hits, 2);

  state.failing = false;
  const on = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, { isEnabled: true });
  assert.equal(on.status, 200);
  const { destination } = await on.json();
  assert.equal(destination.isEnabled, true);
  assert.equal(destination.health.state, "healthy", "enabling resumes too");
  await submitAndSettle(h, form.publicKey);
  assert.equal(sink.received.length, 1);
});

Deno.test("DESTINATION_PAUSE_AFTER_HOURS 0 never pauses; the failing record is kept for owner notifications", async () => {
  await using h = await startHarness({ pauseAfterMs: 0, retryScheduleMs: [] });
  await using sink = startWebhookSink(() => new Response("down", { status: 503 }));
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  for (let i = 0; i < 3; i++) await submitAndSettle(h, form.publicKey);
  assert.equal(sink.hits, 3);
  await waitFor(async () => (await failing(h, id))?.failures === 3, {
    message: "3 failures counted",
  });
  assert.equal((await destinationView(h, form.id, id)).health.state, "healthy");
});

Deno.test("deleting a paused destination deletes its record and ends its held jobs", async () => {
  await using h = await startHarness({ pauseAfterMs: 1, retryScheduleMs: [] });
  await using sink = startWebhookSink(() => new Response("gone", { status: 410 }));
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  await submitAndSettle(h, form.publicKey);
  await spanPassed((await failingSoon(h, id)).since, 1);
  await submitAndSettle(h, form.publicKey);
  await waitFor(async () => (await destinationView(h, form.id, id)).health.state === "paused", {
    message: "paused",
  });
  const held = await submitAndSettle(h, form.publicKey);
  const response = await h.admin("DELETE", `/forms/${form.id}/destinations/${id}`);
  assert.equal(response.status, 200);
  assert.equal(await failing(h, id), null);
  await waitFor(async () => (await storedJobs(h)).length === 0, { message: "held job ended" });
  const ended = (await outcomeViews(h, form.id)).find((o) => o.submissionId === held);
  assert.equal(ended?.lastError, "Destination was deleted before delivery");
});
