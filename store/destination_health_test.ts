import assert from "node:assert/strict";
import { startHarness } from "../tests/helpers/harness.ts";
import { type FailingRecord, recordHealth } from "./destination_health.ts";
import { getDestination, updateDestination } from "./destinations.ts";
import { destinationFailingKey } from "./keys.ts";

const HOUR = 3600_000;
const DAY = 24 * HOUR;
const options = (now: number) => ({ pauseAfterMs: DAY, now });
const broken = (error: string) => ({
  delivered: false as const,
  blame: "destination" as const,
  error,
});
const refused = { delivered: false as const, blame: "submission" as const, error: "422" };

async function setUp() {
  const h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const id = await h.addDestination(form.id, {
    type: "webhook",
    config: { url: "https://hooks.example.com/in" },
  });
  const job = { formId: form.id, destinationId: id };
  const failing = async () =>
    (await h.service.db.kv.get<FailingRecord>(destinationFailingKey(id))).value;
  const health = async () => (await getDestination(h.service.db, form.id, id))!.health;
  return { h, job, failing, health, formId: form.id, id };
}

Deno.test("recordHealth pauses only when failures span the whole period with no delivery between", async () => {
  const { h, job, failing, health } = await setUp();
  await using _h = h;
  const t0 = Date.parse("2026-11-20T08:00:00Z");
  const db = h.service.db;
  // Hundreds of failures within the day pause nothing.
  for (let i = 0; i < 300; i++) {
    assert.equal(await recordHealth(db, job, broken(`e${i}`), options(t0 + i * 60_000)), null);
  }
  assert.deepEqual(await failing(), {
    since: t0,
    failures: 300,
    lastError: "e299",
    lastStatusCode: null,
    toldAt: null,
  });
  assert.equal(await recordHealth(db, job, broken("late"), options(t0 + DAY - 1)), null);
  assert.equal((await health()).state, "healthy");
  // The failure that comes a full day after the first pauses.
  assert.equal(await recordHealth(db, job, broken("Cannot deliver"), options(t0 + DAY)), "paused");
  const paused = await health();
  assert.equal(paused.state, "paused");
  assert.equal(paused.since, new Date(t0 + DAY).toISOString());
  assert.equal(
    paused.reason,
    "Failing since 2026-11-20T08:00:00.000Z with no delivery in between " +
      "(302 failed attempts); last error: Cannot deliver",
  );
  // Further failures of a paused destination are not counted.
  assert.equal(await recordHealth(db, job, broken("more"), options(t0 + 2 * DAY)), null);
  assert.equal((await failing())?.failures, 302);
});

Deno.test("recordHealth: a delivery ends the span; a submission's refusal neither counts nor clears", async () => {
  const { h, job, failing, health } = await setUp();
  await using _h = h;
  const db = h.service.db;
  const t0 = Date.parse("2026-11-20T08:00:00Z");
  await recordHealth(db, job, refused, options(t0));
  assert.equal(await failing(), null, "a 422 starts nothing");
  await recordHealth(db, job, broken("down"), options(t0));
  await recordHealth(db, job, refused, options(t0 + HOUR));
  assert.equal((await failing())?.failures, 1, "a 422 neither counts nor clears");
  assert.equal(
    await recordHealth(db, job, { delivered: true }, options(t0 + 2 * HOUR)),
    "recovered",
  );
  assert.equal(await failing(), null);
  // A new span starts with the next failure: a day after t0 is not enough.
  await recordHealth(db, job, broken("down"), options(t0 + 3 * HOUR));
  assert.equal(await recordHealth(db, job, broken("down"), options(t0 + DAY)), null);
  assert.equal(await recordHealth(db, job, broken("down"), options(t0 + 3 * HOUR + DAY)), "paused");
  assert.equal((await health()).state, "paused");
});

Deno.test("recordHealth counts nothing for a destination the tenant disabled; span 0 counts but never pauses", async () => {
  const { h, job, failing, formId, id } = await setUp();
  await using _h = h;
  const db = h.service.db;
  assert.equal(await recordHealth(db, job, broken("down"), { pauseAfterMs: 0, now: 0 }), null);
  assert.equal(
    await recordHealth(db, job, broken("down"), { pauseAfterMs: 0, now: DAY * 9 }),
    null,
  );
  assert.equal(
    (await failing())?.failures,
    2,
    "the failing record is kept: notifications tell from it",
  );
  assert.equal(
    await recordHealth(db, job, { delivered: true }, { pauseAfterMs: 0, now: DAY * 9 }),
    "recovered",
  );
  assert.equal(await failing(), null);
  await updateDestination(db, formId, id, { isEnabled: false });
  await recordHealth(db, job, broken("down"), options(0));
  await recordHealth(db, job, broken("down"), options(DAY));
  assert.equal(await failing(), null);
  const destination = await getDestination(db, formId, id);
  assert.deepEqual([destination?.isEnabled, destination?.health.state], [false, "healthy"]);
});

Deno.test("recordHealth counts concurrent failures once each", async () => {
  const { h, job, failing } = await setUp();
  await using _h = h;
  await Promise.all(
    Array.from(
      { length: 12 },
      (_, n) => recordHealth(h.service.db, job, broken(`${n}`), options(n)),
    ),
  );
  assert.equal((await failing())?.failures, 12);
});

Deno.test("a pause reason names URLs by scheme, host and port only", async () => {
  const { h, job, health } = await setUp();
  await using _h = h;
  const error = 'Cannot deliver to "https://hooks.slack.com/services/T0/B0/SECRET?k=SECRET": 404';
  await recordHealth(h.service.db, job, broken(error), options(0));
  assert.equal(await recordHealth(h.service.db, job, broken(error), options(DAY)), "paused");
  const { reason } = await health();
  assert.ok(
    reason?.endsWith('last error: Cannot deliver to "https://hooks.slack.com": 404'),
    reason!,
  );
  assert.ok(!reason?.includes("SECRET"));
});

Deno.test("recordHealth with a clear map reads nothing for a destination it found clear within 10 s", async () => {
  const { h, job, failing } = await setUp();
  await using _h = h;
  const db = h.service.db;
  const clear = new Map<string, number>();
  const t0 = Date.parse("2026-11-20T08:00:00Z");
  await recordHealth(db, job, { delivered: true }, { ...options(t0), clear });
  assert.equal(clear.get(job.destinationId), t0, "found clear");
  // Another process records a failure; this one, taking the destination for clear, does
  // not read it within 10 s, and clears it after.
  await recordHealth(db, job, broken("down"), options(t0 + 1));
  await recordHealth(db, job, { delivered: true }, { ...options(t0 + 5_000), clear });
  assert.notEqual(await failing(), null);
  await recordHealth(db, job, { delivered: true }, { ...options(t0 + 10_000), clear });
  assert.equal(await failing(), null);
  // A failure seen here forgets that the destination was clear.
  await recordHealth(db, job, broken("down"), { ...options(t0 + 10_001), clear });
  assert.equal(clear.has(job.destinationId), false);
  await recordHealth(db, job, { delivered: true }, { ...options(t0 + 10_002), clear });
  assert.equal(await failing(), null);
});
