import assert from "node:assert/strict";
import { startHarness } from "../tests/helpers/harness.ts";
import { deleteEnvelopeIfLast, sweepEnvelopeMarkers } from "./envelope_cleanup.ts";
import { decodeJob, encodeJob, type StoredJob } from "./job_record.ts";
import { claimJob, finishJob, rescheduleJob } from "./jobs.ts";
import { jobByDestinationKey, jobKey } from "./keys.ts";
import { outcomeOf } from "./outcomes.ts";

const WEBHOOK = { type: "webhook", config: { url: "https://hooks.example.com/in" } };

async function count(kv: Deno.Kv, prefix: string) {
  return (await Array.fromAsync(kv.list({ prefix: [prefix] }))).length;
}

/** A submission to a form with `destinations` webhooks, and its claimed jobs. */
async function claimedSubmission(destinations: number) {
  const h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  for (let i = 0; i < destinations; i++) await h.addDestination(form.id, WEBHOOK);
  assert.equal((await h.submit(form.publicKey, { a: 1 })).status, 202);
  const jobs = await Array.fromAsync(h.service.db.kv.list<StoredJob>({ prefix: ["jobs"] }));
  const claimed = [];
  for (const entry of jobs) {
    const ref = decodeJob(entry);
    claimed.push((await claimJob(h.service.db, ref, { now: Date.now(), leaseMs: 60_000 }))!);
  }
  return { h, claimed };
}

Deno.test("a job finished with 'delete' removes the envelope in its own commit", async () => {
  const { h, claimed } = await claimedSubmission(1);
  await using _ = h;
  const [one] = claimed;
  assert.ok(
    await finishJob(h.service.db, one, outcomeOf(one.job, "delivered"), {
      cleanup: "delete",
      retainMs: 0,
    }),
  );
  assert.equal(await count(h.service.db.kv, "envelopes"), 0);
  assert.equal(await count(h.service.db.kv, "envelope_checks"), 0);
});

Deno.test("of two siblings checked after their commits, the last one deletes the envelope", async () => {
  const { h, claimed } = await claimedSubmission(2);
  await using _ = h;
  const [a, b] = claimed;
  const db = h.service.db;
  assert.ok(
    await finishJob(db, a, outcomeOf(a.job, "delivered"), { cleanup: "check", retainMs: 0 }),
  );
  await deleteEnvelopeIfLast(db, a.job, { retained: false });
  assert.equal(await count(db.kv, "envelopes"), 1, "b is still pending");
  assert.equal(await count(db.kv, "envelope_checks"), 0);
  assert.ok(await finishJob(db, b, outcomeOf(b.job, "failed"), { cleanup: "check", retainMs: 0 }));
  await deleteEnvelopeIfLast(db, b.job, { retained: false });
  assert.equal(await count(db.kv, "envelopes"), 0);
  assert.equal(await count(db.kv, "envelope_checks"), 0);
});

Deno.test("left to a claimed sibling, the envelope stays, no marker is written, and the sibling deletes it", async () => {
  const { h, claimed } = await claimedSubmission(2);
  await using _ = h;
  const [a, b] = claimed;
  const db = h.service.db;
  const leaveTo = [{ ref: b.job, versionstamp: b.versionstamp }];
  assert.ok(
    await finishJob(db, a, outcomeOf(a.job, "delivered"), { cleanup: { leaveTo }, retainMs: 0 }),
  );
  assert.equal(await count(db.kv, "envelopes"), 1, "b has still to be delivered");
  assert.equal(await count(db.kv, "envelope_checks"), 0);
  assert.equal(await count(db.kv, "jobs"), 1);
  assert.ok(
    await finishJob(db, b, outcomeOf(b.job, "delivered"), { cleanup: "delete", retainMs: 0 }),
  );
  assert.equal(await count(db.kv, "envelopes"), 0);
});

Deno.test("left to a sibling that changed since its claim, the finish fails and changes nothing", async () => {
  const { h, claimed } = await claimedSubmission(2);
  await using _ = h;
  const [a, b] = claimed;
  const db = h.service.db;
  // Another process ends b meanwhile: its check after the commit sees a still there.
  assert.ok(
    await finishJob(db, b, outcomeOf(b.job, "delivered"), { cleanup: "check", retainMs: 0 }),
  );
  await deleteEnvelopeIfLast(db, b.job, { retained: false });
  const leaveTo = [{ ref: b.job, versionstamp: b.versionstamp }];
  assert.equal(
    await finishJob(db, a, outcomeOf(a.job, "delivered"), { cleanup: { leaveTo }, retainMs: 0 }),
    false,
  );
  assert.equal(await count(db.kv, "jobs"), 1, "a is unchanged");
  assert.equal(await count(db.kv, "envelopes"), 1);
});

Deno.test("a check cut short by a crash is finished by the sweep of envelope markers", async () => {
  const { h, claimed } = await claimedSubmission(1);
  await using _ = h;
  const [one] = claimed;
  const db = h.service.db;
  assert.ok(
    await finishJob(db, one, outcomeOf(one.job, "delivered"), { cleanup: "check", retainMs: 0 }),
  );
  // The process dies here, before deleteEnvelopeIfLast.
  assert.equal(await count(db.kv, "envelopes"), 1);
  const young = await sweepEnvelopeMarkers(db, { now: Date.now(), olderThanMs: 60_000, limit: 10 });
  assert.equal(young, 0, "a marker younger than the lease belongs to a check under way");
  assert.equal(await count(db.kv, "envelopes"), 1);
  const later = Date.now() + 61_000;
  assert.equal(await sweepEnvelopeMarkers(db, { now: later, olderThanMs: 60_000, limit: 10 }), 1);
  assert.equal(await count(db.kv, "envelopes"), 0);
  assert.equal(await count(db.kv, "envelope_checks"), 0);
});

Deno.test("a job is stored without its field names and its key's parts, and reads back whole", async () => {
  const { h, claimed } = await claimedSubmission(2);
  await using _ = h;
  for (const { job } of claimed) {
    const key = jobKey(job);
    const stored = (await h.service.db.kv.get<StoredJob>(key)).value!;
    assert.ok(Array.isArray(stored));
    assert.ok(!stored.includes(job.submissionId) && !stored.includes(job.destinationId));
    assert.deepEqual(decodeJob({ key, value: stored }), job);
    assert.deepEqual(decodeJob({ key, value: encodeJob(job) }), job);
  }
});

Deno.test("a job ends with its index entry deleted, except one claimed as stored: its ending commit leaves the index alone", async () => {
  const { h, claimed } = await claimedSubmission(2);
  await using _ = h;
  const { db } = h.service;
  const [putBack, asStored] = claimed;
  // Put back once: from then on the job is in its destination's index.
  const next = { ...putBack.job, state: "pending" as const, dueAt: Date.now() };
  assert.ok(await rescheduleJob(db, putBack, next, { wakeUp: null }));
  assert.notEqual((await db.kv.get(jobByDestinationKey(next))).versionstamp, null);
  const again = await claimJob(db, next, { now: Date.now(), leaseMs: 60_000 });
  assert.ok(again);
  assert.ok(
    await finishJob(db, again, outcomeOf(again.job, "delivered"), {
      cleanup: "check",
      retainMs: 0,
    }),
  );
  assert.equal((await db.kv.get(jobByDestinationKey(next))).versionstamp, null);

  // A job as stored has no index entry; a marker where it would be shows the commit has no
  // delete for it.
  await db.kv.set(jobByDestinationKey(asStored.job), "marker");
  const unindexed = { ...asStored, unindexed: true as const };
  assert.ok(
    await finishJob(db, unindexed, outcomeOf(asStored.job, "delivered"), {
      cleanup: "check",
      retainMs: 0,
    }),
  );
  assert.equal((await db.kv.get(jobByDestinationKey(asStored.job))).value, "marker");
  assert.equal((await db.kv.get(jobKey(asStored.job))).versionstamp, null);
});
