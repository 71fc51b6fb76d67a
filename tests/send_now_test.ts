import assert from "node:assert/strict";
import { expectError } from "./helpers/assert.ts";
import {
  type OutcomeView,
  outcomeViews,
  submitAndSettle,
  switchableSink,
  webhook,
} from "./helpers/deliveries.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { recordHealth } from "../store/destination_health.ts";
import { waitFor } from "./helpers/wait.ts";

Deno.test("send now: a delivery waiting an hour for its retry is attempted at once", async () => {
  await using h = await startHarness({ retryScheduleMs: [3_600_000] });
  const { sink, state } = switchableSink(503);
  await using _sink = sink;
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  await h.submit(form.publicKey, { name: "Ada" });
  let outcome: OutcomeView | undefined;
  await waitFor(async () => {
    [outcome] = await outcomeViews(h, form.id);
    return outcome?.status === "retrying";
  }, { message: "retrying" });
  assert.ok(outcome !== undefined);
  // An hour with the schedule's ±20 % jitter: at least 48 minutes after it was scheduled.
  assert.ok(Date.parse(outcome.nextAttemptAt!) > Date.now() + 0.8 * 3_600_000 - 60_000);
  const [submissionId] = outcome.deliveryId.split(".");
  assert.equal(outcome.deliveryId, `${submissionId}.${id}`, "deliveryId names the delivery");

  state.failing = false;
  const path = `/forms/${form.id}/deliveries/${outcome.deliveryId}/send-now`;
  const response = await h.admin("POST", path);
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), { ok: true });
  await waitFor(async () => (await outcomeViews(h, form.id))[0].status === "delivered", {
    message: "delivered",
  });
  assert.equal(sink.hits, 2, "one failed attempt, then the one sent now");

  await expectError(
    await h.admin("POST", path),
    409,
    "Delivery is not waiting for a retry: delivered, failed, or not of this form",
  );
  await expectError(
    await h.admin("POST", `/forms/${form.id}/deliveries/nonsense/send-now`),
    404,
    "Delivery not found",
  );
  // Another form's delivery is not found through this form.
  const other = await h.createForm({ name: "Other" });
  await submitAndSettle(h, other.publicKey);
  await expectError(
    await h.admin("POST", `/forms/${other.id}/deliveries/${outcome.deliveryId}/send-now`),
    409,
    "Delivery is not waiting for a retry: delivered, failed, or not of this form",
  );
});

/** Waits until the form has `count` outcomes, all with `status`. */
async function waitForAll(h: Harness, formId: string, count: number, status: string) {
  await waitFor(async () => {
    const outcomes = await outcomeViews(h, formId);
    return outcomes.length === count && outcomes.every((o) => o.status === status);
  }, { message: `${count} ${status}` });
}

/**
 * A form whose webhook answers 503 until `state.failing` is cleared, with one submission
 * per name, each waiting for its retry.
 */
async function retryingDeliveries(h: Harness, names: string[]) {
  const { sink, state } = switchableSink(503);
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  for (const name of names) await h.submit(form.publicKey, { name });
  await waitForAll(h, form.id, names.length, "retrying");
  return { sink, state, form, id };
}

Deno.test("send all waiting now: every delivery of a destination waiting for its retry is attempted at once", async () => {
  await using h = await startHarness({ retryScheduleMs: [3_600_000] });
  const { sink, state, form, id } = await retryingDeliveries(h, ["Ada", "Grace", "Edsger"]);
  await using _sink = sink;

  state.failing = false;
  const path = `/forms/${form.id}/destinations/${id}/send-now`;
  const response = await h.admin("POST", path);
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), { ok: true, sent: 3, inFlight: 0 });
  await waitForAll(h, form.id, 3, "delivered");
  assert.equal(sink.hits, 6, "three failed attempts, then the three sent now");

  // Nothing waits any more: nothing to send, nothing attempted.
  assert.deepEqual(await (await h.admin("POST", path)).json(), { ok: true, sent: 0, inFlight: 0 });
  assert.equal(sink.hits, 6);
  await expectError(
    await h.admin("POST", `/forms/${form.id}/destinations/${crypto.randomUUID()}/send-now`),
    404,
    "Destination not found",
  );
  await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, { isEnabled: false });
  await expectError(
    await h.admin("POST", path),
    409,
    "Destination is disabled: enable it to redeliver",
  );
});

Deno.test("a destination that recovers brings its other deliveries waiting for a retry forward", async () => {
  await using h = await startHarness({ retryScheduleMs: [3_600_000], pauseAfterMs: 86_400_000 });
  const { sink, state, form } = await retryingDeliveries(h, ["Ada", "Grace", "Edsger"]);
  await using _sink = sink;

  // The receiver is fixed; one delivery sent now succeeds, and the two others, due in an
  // hour, follow without being asked.
  state.failing = false;
  const [first] = await outcomeViews(h, form.id);
  const response = await h.admin(
    "POST",
    `/forms/${form.id}/deliveries/${first.deliveryId}/send-now`,
  );
  assert.equal(response.status, 200);
  await response.body?.cancel();
  await waitForAll(h, form.id, 3, "delivered");
  assert.equal(sink.hits, 6);
  assert.ok(
    h.logs.some((line) =>
      line.includes("its waiting deliveries brought forward") && line.includes('"deliveries":2')
    ),
    "the recovery is logged with how many were brought forward",
  );
});

Deno.test("resuming a paused destination sends its deliveries waiting for a retry too", async () => {
  await using h = await startHarness({ retryScheduleMs: [3_600_000], pauseAfterMs: 86_400_000 });
  const { sink, state, form, id } = await retryingDeliveries(h, ["Ada", "Grace"]);
  await using _sink = sink;
  // Its service says it is gone: paused at once, its two deliveries still waiting an hour.
  const job = { formId: form.id, destinationId: id };
  const gone = {
    delivered: false as const,
    blame: "destination" as const,
    error: "410",
    gone: true,
  };
  assert.equal(
    await recordHealth(h.service.db, job, gone, { pauseAfterMs: 1, now: Date.now() }),
    "paused",
  );
  await expectError(
    await h.admin("POST", `/forms/${form.id}/destinations/${id}/send-now`),
    409,
    "Destination is paused: resume it (POST …/resume), which delivers what it holds",
  );

  state.failing = false;
  const response = await h.admin("POST", `/forms/${form.id}/destinations/${id}/resume`);
  assert.equal(response.status, 200);
  await response.body?.cancel();
  await waitForAll(h, form.id, 2, "delivered");
  assert.equal(sink.hits, 4);
});

Deno.test("GET /forms flags each form's destinations that are failing or paused, in words", async () => {
  await using h = await startHarness({ retryScheduleMs: [3_600_000], pauseAfterMs: 86_400_000 });
  const { sink, state } = switchableSink(503);
  await using _sink = sink;
  const form = await h.createForm();
  const quiet = await h.createForm({ name: "Quiet" });
  const id = await h.addDestination(form.id, { ...webhook(sink.url), name: "Sales inbox" });
  const alertsOf = async (formId: string) => {
    const { forms } = await (await h.admin("GET", "/forms")).json();
    return forms.find((f: { id: string }) => f.id === formId).destinationAlerts;
  };
  assert.deepEqual(await alertsOf(form.id), []);

  await h.submit(form.publicKey, { name: "Ada" });
  await waitForAll(h, form.id, 1, "retrying");
  const [failing] = await alertsOf(form.id);
  assert.equal(failing.destinationId, id);
  assert.equal(failing.name, "Sales inbox");
  assert.equal(failing.type, "webhook");
  assert.equal(failing.state, "failing");
  assert.match(
    failing.reason,
    /^Failing since \S+Z with no delivery in between \(1 failed attempt\); last error: .*503/,
  );
  assert.deepEqual(await alertsOf(quiet.id), [], "only the form whose destination fails");

  const job = { formId: form.id, destinationId: id };
  const gone = {
    delivered: false as const,
    blame: "destination" as const,
    error: "HTTP 410",
    gone: true,
  };
  await recordHealth(h.service.db, job, gone, { pauseAfterMs: 1, now: Date.now() });
  const [paused] = await alertsOf(form.id);
  assert.equal(paused.state, "paused");
  assert.match(paused.reason, /no longer exists \(HTTP 410\)/);

  state.failing = false;
  await (await h.admin("POST", `/forms/${form.id}/destinations/${id}/resume`)).body?.cancel();
  await waitForAll(h, form.id, 1, "delivered");
  assert.deepEqual(await alertsOf(form.id), [], "resumed and delivering: nothing to flag");
});
