import assert from "node:assert/strict";
import { recordFinalOutcome } from "../store/destination_health.ts";
import { destinationFailuresKey } from "../store/keys.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

interface DestinationView {
  id: string;
  isEnabled: boolean;
  disabledReason: string | null;
  disabledAt: string | null;
}

interface Outcome {
  submissionId: string;
  destinationId: string;
  status: string;
  lastError: string | null;
}

const webhook = (url: string) => ({ type: "webhook", config: { url } });

async function destinations(h: Harness, formId: string): Promise<DestinationView[]> {
  const response = await h.admin("GET", `/forms/${formId}/destinations`);
  assert.equal(response.status, 200);
  return (await response.json()).destinations;
}

async function destination(h: Harness, formId: string, id: string): Promise<DestinationView> {
  const found = (await destinations(h, formId)).find((d) => d.id === id);
  assert.ok(found, `destination ${id} is listed`);
  return found;
}

async function outcomes(h: Harness, formId: string): Promise<Outcome[]> {
  const response = await h.admin("GET", `/forms/${formId}/deliveries?limit=500`);
  assert.equal(response.status, 200);
  return (await response.json()).deliveries;
}

async function failureCount(h: Harness, destinationId: string): Promise<number | null> {
  return (await h.service.db.kv.get<number>(destinationFailuresKey(destinationId))).value;
}

/**
 * Submits once and waits until every job of the submission is final (the jobs are
 * written at acceptance and deleted with the commit that records their outcome) and
 * the engine has run its final-outcome hook (a delivery counts as active until then).
 */
async function submitAndSettle(h: Harness, publicKey: string, payload: unknown = { a: 1 }) {
  const response = await h.submit(publicKey, payload);
  assert.equal(response.status, 202);
  const { submissionId } = await response.json();
  await waitFor(async () => {
    const { active, waiting } = h.service.engine!.stats();
    return await countKeys(h.service.db.kv, "jobs") === 0 && active === 0 && waiting === 0;
  }, { message: `jobs of ${submissionId} final` });
  return submissionId as string;
}

/** A sink whose answer the test switches between 200 and 400. */
function switchableSink() {
  const state = { failing: true };
  const sink = startWebhookSink(() =>
    state.failing ? new Response("bad request", { status: 400 }) : new Response("ok")
  );
  return { sink, state };
}

const settings = { autoDisableAfterFailures: 3, retryScheduleMs: [] };

Deno.test("a destination failing 3 times in a row is disabled; its form's other destination keeps receiving", async () => {
  await using h = await startHarness(settings);
  await using failing = startWebhookSink(() => new Response("bad request", { status: 400 }));
  await using healthy = startWebhookSink();
  const form = await h.createForm();
  const badId = await h.addDestination(form.id, webhook(failing.url));
  const goodId = await h.addDestination(form.id, webhook(healthy.url));

  for (let i = 0; i < 2; i++) await submitAndSettle(h, form.publicKey, { i });
  assert.equal((await destination(h, form.id, badId)).isEnabled, true, "enabled after 2");
  assert.equal(await failureCount(h, badId), 2);

  const before = Date.now();
  await submitAndSettle(h, form.publicKey, { i: 2 });
  const bad = await destination(h, form.id, badId);
  assert.equal(bad.isEnabled, false);
  assert.match(
    bad.disabledReason ?? "",
    /^Disabled after 3 consecutive failed deliveries; last error: Cannot deliver to "http:\/\/127\.0\.0\.1:\d+": 400 Bad Request$/,
  );
  const disabledAt = Date.parse(bad.disabledAt ?? "");
  assert.ok(
    disabledAt >= before - 1000 && disabledAt <= Date.now(),
    `disabledAt ${bad.disabledAt}`,
  );
  const good = await destination(h, form.id, goodId);
  assert.deepEqual([good.isEnabled, good.disabledReason, good.disabledAt], [true, null, null]);
  assert.equal(failing.hits, 3);

  // A 4th submission makes no job for the disabled destination; the healthy one gets it.
  const fourth = await submitAndSettle(h, form.publicKey, { i: 3 });
  const ofFourth = (await outcomes(h, form.id)).filter((o) => o.submissionId === fourth);
  assert.deepEqual(ofFourth.map((o) => [o.destinationId, o.status]), [[goodId, "delivered"]]);
  assert.equal(failing.hits, 3);
  assert.equal(healthy.received.length, 4);
  assert.ok(h.logs.every((line) => !line.includes("destination health update failed")));
});

Deno.test("a delivered outcome resets the count: 2 failures, 1 success, 2 failures leave it enabled", async () => {
  await using h = await startHarness(settings);
  const { sink, state } = switchableSink();
  await using _sink = sink;
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  for (const failing of [true, true, false, true, true]) {
    state.failing = failing;
    await submitAndSettle(h, form.publicKey);
  }
  const view = await destination(h, form.id, id);
  assert.deepEqual([view.isEnabled, view.disabledReason, view.disabledAt], [true, null, null]);
  assert.equal(await failureCount(h, id), 2);
  const statuses = (await outcomes(h, form.id)).map((o) => o.status).sort();
  assert.deepEqual(statuses, ["delivered", "failed", "failed", "failed", "failed"]);
  // One more failure makes 3 in a row.
  await submitAndSettle(h, form.publicKey);
  assert.equal((await destination(h, form.id, id)).isEnabled, false);
});

Deno.test("PATCH isEnabled true re-enables an auto-disabled destination and restarts the count", async () => {
  await using h = await startHarness(settings);
  const { sink, state } = switchableSink();
  await using _sink = sink;
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  for (let i = 0; i < 3; i++) await submitAndSettle(h, form.publicKey);
  assert.equal((await destination(h, form.id, id)).isEnabled, false);
  assert.equal(await failureCount(h, id), 3);

  const response = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
    isEnabled: true,
  });
  assert.equal(response.status, 200);
  const { destination: patched } = await response.json();
  assert.deepEqual([patched.isEnabled, patched.disabledReason, patched.disabledAt], [
    true,
    null,
    null,
  ]);
  assert.equal(await failureCount(h, id), null, "count removed on re-enabling");

  // Two failures after re-enabling: counted from zero, so still enabled.
  for (let i = 0; i < 2; i++) await submitAndSettle(h, form.publicKey);
  assert.equal((await destination(h, form.id, id)).isEnabled, true);
  assert.equal(await failureCount(h, id), 2);

  // Fixed receiver: delivered again.
  state.failing = false;
  await submitAndSettle(h, form.publicKey);
  assert.equal(sink.received.length, 1);
  assert.equal(await failureCount(h, id), null);
});

Deno.test("failures of a destination the tenant disabled are not counted", async () => {
  await using h = await startHarness(settings);
  await using failing = startWebhookSink(() => new Response("bad request", { status: 400 }));
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(failing.url));
  await submitAndSettle(h, form.publicKey);
  const job = {
    destinationId: id,
    formId: form.id,
    lastError: "Destination was disabled before delivery",
  };
  const patch = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
    isEnabled: false,
  });
  assert.equal(patch.status, 200);
  for (let i = 0; i < 5; i++) {
    await recordFinalOutcome(h.service.db, job, "failed", { threshold: 3 });
  }
  assert.equal(await failureCount(h, id), 1);
  const view = await destination(h, form.id, id);
  assert.deepEqual([view.isEnabled, view.disabledReason], [false, null], "the tenant's disable");
});

Deno.test("concurrent final failures are all counted, and the one reaching the threshold disables", async () => {
  await using h = await startHarness(settings);
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook("http://127.0.0.1:9/hook"));
  const job = (n: number) => ({ destinationId: id, formId: form.id, lastError: `failure ${n}` });
  await Promise.all(
    Array.from(
      { length: 12 },
      (_, n) => recordFinalOutcome(h.service.db, job(n), "failed", { threshold: 12 }),
    ),
  );
  assert.equal(await failureCount(h, id), 12);
  const view = await destination(h, form.id, id);
  assert.equal(view.isEnabled, false);
  assert.match(view.disabledReason ?? "", /^Disabled after 12 consecutive failed deliveries; /);
});

Deno.test("deleting a destination deletes its failure count", async () => {
  await using h = await startHarness(settings);
  await using failing = startWebhookSink(() => new Response("bad request", { status: 400 }));
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(failing.url));
  for (let i = 0; i < 2; i++) await submitAndSettle(h, form.publicKey);
  assert.equal(await failureCount(h, id), 2);
  const response = await h.admin("DELETE", `/forms/${form.id}/destinations/${id}`);
  assert.equal(response.status, 200);
  assert.equal(await failureCount(h, id), null);
});

Deno.test("AUTO_DISABLE_AFTER_FAILURES 0 never disables and keeps no count", async () => {
  await using h = await startHarness({ autoDisableAfterFailures: 0, retryScheduleMs: [] });
  await using failing = startWebhookSink(() => new Response("bad request", { status: 400 }));
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(failing.url));
  for (let i = 0; i < 4; i++) await submitAndSettle(h, form.publicKey);
  assert.equal(failing.hits, 4);
  assert.equal((await destination(h, form.id, id)).isEnabled, true);
  assert.equal(await failureCount(h, id), null);
});
