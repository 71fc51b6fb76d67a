import assert from "node:assert/strict";
import { startHarness } from "../tests/helpers/harness.ts";
import type { Db } from "../store/db.ts";
import { deleteEnvelopeIfLast } from "../store/envelope_cleanup.ts";
import { type ClaimedJob, decodeJob, refKey, type StoredJob } from "../store/job_record.ts";
import { claimJob, finishJob } from "../store/jobs.ts";
import type { JobKeyParts } from "../store/keys.ts";
import { outcomeOf } from "../store/outcomes.ts";
import type { SendResult } from "./attempt.ts";
import { createOutcomeStep } from "./apply_result.ts";

const DELIVERED: SendResult = { delivered: true, receipt: { statusCode: 200 } };

async function count(kv: Deno.Kv, prefix: string) {
  return (await Array.fromAsync(kv.list({ prefix: [prefix] }))).length;
}

/**
 * A submission to two webhooks with both jobs claimed, and an outcome step whose
 * "held here" jobs are `claims` and whose jobs with a claim or result being committed are
 * `committing`; `parts` counts the commits it asks for.
 */
async function twoClaimedJobs() {
  const h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  for (const path of ["/a", "/b"]) {
    await h.addDestination(form.id, {
      type: "webhook",
      config: { url: `https://hooks.example.com${path}` },
    });
  }
  assert.equal((await h.submit(form.publicKey, { a: 1 })).status, 202);
  const { db } = h.service;
  const claimed: ClaimedJob[] = [];
  for await (const entry of db.kv.list<StoredJob>({ prefix: ["jobs"] })) {
    claimed.push((await claimJob(db, decodeJob(entry), { now: Date.now(), leaseMs: 60_000 }))!);
  }
  const claims = new Map<string, string>();
  for (const { job, versionstamp } of claimed) claims.set(refKey(job), versionstamp);
  const committing = new Map<string, Promise<unknown>>();
  const counted = { parts: 0 };
  const countingDb: Db = {
    ...db,
    batcher: {
      sender: db.batcher.sender,
      commit(part) {
        counted.parts++;
        return db.batcher.commit(part);
      },
    },
  };
  const outcomes = createOutcomeStep({
    db: countingDb,
    config: { retryScheduleMs: [1000], sweepIntervalMs: 60_000 },
    queues: false,
    now: Date.now,
    envelopeTtlMs: 3_600_000,
    retainMs: 0,
    heldHere: (ref: JobKeyParts) => claims.get(refKey(ref)),
    committing: (ref: JobKeyParts) => committing.get(refKey(ref)),
    wakeLater() {},
  });
  return { h, db, claimed, claims, committing, counted, outcomes };
}

Deno.test("a job ending beside a sibling claimed here leaves the envelope to it: one commit, no check", async () => {
  const { h, db, claimed: [a, b], claims, counted, outcomes } = await twoClaimedJobs();
  await using _ = h;
  claims.delete(refKey(a.job)); // a's result is being recorded
  assert.equal((await outcomes.record(a, DELIVERED)).result, "delivered");
  assert.equal(counted.parts, 1, "the finishing commit only: no marker to delete afterwards");
  assert.equal(await count(db.kv, "envelopes"), 1, "b still needs it");
  assert.equal(await count(db.kv, "envelope_checks"), 0);

  claims.delete(refKey(b.job));
  assert.equal((await outcomes.record(b, DELIVERED)).result, "delivered");
  assert.equal(counted.parts, 2, "b, seeing a done here, deletes the envelope in its own commit");
  assert.equal(await count(db.kv, "envelopes"), 0);
  assert.equal(await count(db.kv, "jobs"), 0);
});

Deno.test("a job ending when its sibling is not claimed here checks after its commit", async () => {
  const { h, db, claimed: [a], claims, counted, outcomes } = await twoClaimedJobs();
  await using _ = h;
  claims.clear(); // b is someone else's (or its result is being recorded too)
  assert.equal((await outcomes.record(a, DELIVERED)).result, "delivered");
  assert.equal(counted.parts, 2, "the finishing commit with its marker, then the check's");
  assert.equal(await count(db.kv, "envelopes"), 1);
  assert.equal(await count(db.kv, "envelope_checks"), 0);
});

Deno.test("a sibling that changed since its claim here makes the job check instead, and the envelope goes", async () => {
  const { h, db, claimed: [a, b], claims, outcomes } = await twoClaimedJobs();
  await using _ = h;
  claims.delete(refKey(a.job));
  // Another process ended b meanwhile (its lease had run out here, say).
  assert.ok(
    await finishJob(db, b, outcomeOf(b.job, "delivered"), { cleanup: "check", retainMs: 0 }),
  );
  await deleteEnvelopeIfLast(db, b.job, { retained: false });
  assert.equal(await count(db.kv, "envelopes"), 1, "a was still there when b checked");

  assert.equal((await outcomes.record(a, DELIVERED)).result, "delivered");
  assert.equal(await count(db.kv, "envelopes"), 0, "a, the last, deleted it");
  assert.equal(await count(db.kv, "envelope_checks"), 0);
  assert.equal(await count(db.kv, "jobs"), 0);
});

Deno.test("a job ending while its sibling's claim is being committed waits for the claim, then leaves the envelope to it", async () => {
  const { h, db, claimed: [a, b], claims, committing, counted, outcomes } = await twoClaimedJobs();
  await using _ = h;
  claims.clear(); // a's result is being recorded; b's claim is not in yet
  const claimOfB = Promise.withResolvers<void>();
  committing.set(refKey(b.job), claimOfB.promise);
  const recording = outcomes.record(a, DELIVERED);
  // Without the wait, a's finishing commit would have been asked for by now (synchronously).
  assert.equal(counted.parts, 0, "a waits for b's claim");
  claims.set(refKey(b.job), b.versionstamp);
  committing.delete(refKey(b.job));
  claimOfB.resolve();
  assert.equal((await recording).result, "delivered");
  assert.equal(counted.parts, 1, "left to b, now held: no marker, no check");
  assert.equal(await count(db.kv, "envelopes"), 1);

  claims.clear();
  assert.equal((await outcomes.record(b, DELIVERED)).result, "delivered");
  assert.equal(counted.parts, 2);
  assert.equal(await count(db.kv, "envelopes"), 0);
  assert.equal(await count(db.kv, "envelope_checks"), 0);
});

Deno.test("a job ending while its sibling's result is being committed waits for it and deletes the envelope itself", async () => {
  const { h, db, claimed: [a, b], claims, committing, counted, outcomes } = await twoClaimedJobs();
  await using _ = h;
  claims.delete(refKey(a.job));
  const recordingA = outcomes.record(a, DELIVERED); // left to b, which is held
  committing.set(refKey(a.job), recordingA);
  claims.delete(refKey(b.job)); // b ends while a's commit is under way
  const recordingB = outcomes.record(b, DELIVERED);
  assert.equal((await recordingA).result, "delivered");
  committing.delete(refKey(a.job));
  assert.equal((await recordingB).result, "delivered");
  assert.equal(counted.parts, 2, "one commit each: b saw a done, so no check after its commit");
  assert.equal(await count(db.kv, "envelopes"), 0);
  assert.equal(await count(db.kv, "envelope_checks"), 0);
  assert.equal(await count(db.kv, "jobs"), 0);
});

Deno.test("a job another worker took over ends as lease lost and says so; nothing of it is written", async () => {
  const { h, db, claimed: [a], outcomes } = await twoClaimedJobs();
  await using _ = h;
  // Its lease ran out here and another process claimed it again.
  const again = await claimJob(db, a.job, { now: Date.now() + 120_000, leaseMs: 60_000 });
  assert.ok(again, "claimed by the other worker");
  const fields = await outcomes.record(a, DELIVERED);
  assert.equal(fields.result, "lease lost");
  assert.equal(fields.error, "Another worker took the job over");
  assert.equal(await count(db.kv, "jobs"), 2, "the other worker's job stays");
  assert.equal(await count(db.kv, "deliveries"), 0, "no outcome recorded here");
});
