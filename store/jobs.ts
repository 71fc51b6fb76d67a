/**
 * Job leases: claiming a due job with an atomic versionstamp check (with or without
 * reading it first), putting it back for a retry, and ending it with its final outcome.
 * The lease itself (an attempt counted, due again when the lease ends) is `leased`, the
 * one rule every job kind is claimed by: submission deliveries here, owner notices in
 * notice_jobs.ts.
 * Every write goes through the group committer (db.batcher), every read of a job to
 * claim through the group reader (db.reader).
 *
 * @module
 */
import type { Db } from "./db.ts";
import { applyEnvelopeCleanup, type EnvelopeCleanup } from "./envelope_cleanup.ts";
import {
  type ClaimedJob,
  decodeJob,
  encodeJob,
  JOB_BYTES,
  type JobRecord,
  type KnownJob,
  type StoredJob,
} from "./job_record.ts";
import {
  envelopeChunkKey,
  jobByDestinationKey,
  jobKey,
  type JobKeyParts,
  outcomeKey,
  retainedByDestinationKey,
  retainedKey,
} from "./keys.ts";
import { type DeliveryOutcome, OUTCOME_TTL_MS, outcomeOf } from "./outcomes.ts";
import type { WakeUp } from "./wake.ts";

/** A job kind's record under a new lease: one more attempt, due again when the lease ends. */
export function leased<T extends { attempts: number; dueAt: number }>(
  record: T,
  options: { now: number; leaseMs: number },
): T {
  return { ...record, attempts: record.attempts + 1, dueAt: options.now + options.leaseMs };
}

/**
 * Claims a job that is due (pending past `dueAt`, or in flight past its lease) with an
 * atomic versionstamp check; null when it is gone, not due, or another worker won.
 */
export async function claimJob(
  db: Db,
  ref: JobKeyParts,
  options: { now: number; leaseMs: number },
): Promise<ClaimedJob | null> {
  // The job and the first envelope chunk in one read: the delivery needs both.
  const [entry, firstChunk] = await db.reader.getMany<[StoredJob, Uint8Array<ArrayBuffer>]>([
    jobKey(ref),
    envelopeChunkKey(ref.submittedAt, ref.submissionId, 0),
  ]);
  if (entry.value === null || entry.versionstamp === null) return null;
  const job = decodeJob({ key: entry.key, value: entry.value });
  return await claimKnownJob(db, { job, versionstamp: entry.versionstamp }, {
    ...options,
    envelope: firstChunk.value,
  });
}

/**
 * Claims a job whose state this process knows (it has just accepted the submission),
 * without reading it: the versionstamp check fails, and null comes back, if anyone
 * changed the job since. `envelope` is what the claim brings of the envelope and
 * `unindexed` says the job has no index entry (ClaimedJob).
 */
export async function claimKnownJob(
  db: Db,
  known: KnownJob,
  options: {
    now: number;
    leaseMs: number;
    envelope: ClaimedJob["envelope"];
    unindexed?: true;
  },
): Promise<ClaimedJob | null> {
  const current = known.job;
  if (current.dueAt > options.now) return null;
  const job: JobRecord = {
    ...leased(current, options),
    state: "in_flight",
    updatedAt: options.now,
  };
  const key = jobKey(job);
  const versionstamp = await db.batcher.commit({
    apply: (op) => op.check({ key, versionstamp: known.versionstamp }).set(key, encodeJob(job)),
    mutations: 1,
    checks: 1,
    bytes: JOB_BYTES,
  });
  if (versionstamp === null) return null;
  return { job, versionstamp, envelope: options.envelope, unindexed: options.unindexed };
}

/**
 * Puts a claimed job back, pending until `next.dueAt` after a transient failure, or
 * held (`next.state`) while its destination is paused; its outcome says which. From
 * then on the job is in its destination's index (a job is stored without one), so a
 * resume or redelivery finds it. False when the lease was lost to another worker.
 */
export async function rescheduleJob(
  db: Db,
  claimed: ClaimedJob,
  next: JobRecord,
  options: { wakeUp: WakeUp | null },
): Promise<boolean> {
  const { job } = claimed;
  const versionstamp = await db.batcher.commit({
    apply(op) {
      op.check({ key: jobKey(job), versionstamp: claimed.versionstamp })
        .set(jobKey(next), encodeJob(next))
        .set(jobByDestinationKey(next), 0)
        .set(outcomeKey(next), outcomeOf(next, next.state === "held" ? "held" : "retrying"), {
          expireIn: OUTCOME_TTL_MS,
        });
      if (options.wakeUp) op.enqueue(options.wakeUp.message, { delay: options.wakeUp.delayMs });
    },
    mutations: 4,
    checks: 1,
    bytes: 2 * JOB_BYTES,
  });
  return versionstamp !== null;
}

/**
 * Ends a claimed job: deletes it and records its final outcome, and deletes the
 * envelope, leaves it to siblings this process holds, or leaves a marker for the
 * check that follows (see envelope_cleanup.ts).
 * With `retainMs`, a failed job is kept that long as a retained record (its envelope
 * then stays: the cleanup check counts retained records). False when the lease was
 * lost, or a sibling the envelope was left to changed.
 */
export async function finishJob(
  db: Db,
  claimed: ClaimedJob,
  outcome: DeliveryOutcome,
  options: { cleanup: EnvelopeCleanup; retainMs: number },
): Promise<boolean> {
  const { job } = claimed;
  const { cleanup } = options;
  const retain = outcome.status === "failed" && options.retainMs > 0;
  const versionstamp = await db.batcher.commit({
    apply(op) {
      op.check({ key: jobKey(job), versionstamp: claimed.versionstamp }).delete(jobKey(job))
        .set(outcomeKey(job), outcome, { expireIn: OUTCOME_TTL_MS });
      if (!claimed.unindexed) op.delete(jobByDestinationKey(job));
      if (retain) {
        const expireIn = options.retainMs;
        op.set(retainedKey(job), encodeJob(job), { expireIn })
          .set(retainedByDestinationKey(job), 0, { expireIn });
      }
      applyEnvelopeCleanup(op, job, cleanup);
    },
    mutations: 6 + (cleanup === "delete" ? job.chunks : 0),
    checks: 1 + (typeof cleanup === "object" ? cleanup.leaveTo.length : 0),
    bytes: 2 * JOB_BYTES,
  });
  return versionstamp !== null;
}
