import assert from "node:assert/strict";
import { expectError } from "./helpers/assert.ts";
import {
  type OutcomeView,
  outcomeViews,
  submitAndSettle,
  switchableSink,
  webhook,
} from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
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
