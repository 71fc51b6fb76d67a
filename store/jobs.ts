import type { Db } from "./db.ts";
import type { DestinationType } from "./destinations.ts";

/**
 * Delivery jobs: one per (submission, enabled destination), the durable truth of
 * delivery. A job is pending (waiting for `dueAt`) or in flight (leased until
 * `dueAt`); when it reaches a final state it is deleted and its outcome stays in
 * `deliveries` for 30 days. Only unfinished jobs exist, so the sweep finds due ones by
 * scanning them all: no due-time index to keep, which halves the writes per submission.
 */
export interface JobRecord {
  submissionId: string;
  destinationId: string;
  formId: string;
  orgId: string;
  type: DestinationType;
  state: "pending" | "in_flight";
  attempts: number;
  /** Epoch ms: next attempt when pending, lease expiry when in flight. */
  dueAt: number;
  /** Number of sealed envelope chunks of the submission. */
  chunks: number;
  lastError: string | null;
  lastStatusCode: number | null;
  /** Epoch ms of acceptance. */
  submittedAt: number;
  updatedAt: number;
}

/** A delivery outcome as listed to tenants: ids, status, attempts, errors, times. Never payload. */
export interface DeliveryOutcome {
  submissionId: string;
  destinationId: string;
  destinationType: DestinationType;
  status: "retrying" | "delivered" | "failed";
  attempts: number;
  lastError: string | null;
  lastStatusCode: number | null;
  detail: string | null;
  submittedAt: string;
  updatedAt: string;
  nextAttemptAt: string | null;
}

/** How long outcomes are kept. */
export const OUTCOME_TTL_MS = 30 * 24 * 3600 * 1000;

/** Largest sealed chunk: below KV's 64 KiB value limit with room for the encoding. */
export const ENVELOPE_CHUNK_BYTES = 60_000;

/** Key builders. */
// Keys lead with the acceptance time: new entries append at the end of the KV's
// B-tree instead of landing on random pages, which makes commits several times cheaper.
export const jobKey = (ref: JobRef): ["jobs", number, string, string] => [
  "jobs",
  ref.submittedAt,
  ref.submissionId,
  ref.destinationId,
];
export const envelopeChunkKey = (
  submittedAt: number,
  submissionId: string,
  index: number,
): ["envelopes", number, string, number] => ["envelopes", submittedAt, submissionId, index];
export const outcomeKey = (
  job: Pick<JobRecord, "formId" | "submittedAt" | "submissionId" | "destinationId">,
): ["deliveries", string, number, string, string] => [
  "deliveries",
  job.formId,
  job.submittedAt,
  job.submissionId,
  job.destinationId,
];

/** A job's identity, as carried by wake-up messages. */
export interface JobRef {
  submittedAt: number;
  submissionId: string;
  destinationId: string;
}

/** Splits sealed bytes into chunks that each fit in a KV value. */
export function splitChunks(sealed: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer>[] {
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  for (let i = 0; i < sealed.length; i += ENVELOPE_CHUNK_BYTES) {
    chunks.push(sealed.subarray(i, i + ENVELOPE_CHUNK_BYTES));
  }
  return chunks;
}

/** Reads and joins the sealed envelope chunks; null when any is missing (expired or deleted). */
export async function readSealedEnvelope(
  db: Db,
  job: Pick<JobRecord, "submittedAt" | "submissionId" | "chunks">,
): Promise<Uint8Array<ArrayBuffer> | null> {
  const keys = Array.from(
    { length: job.chunks },
    (_, i) => envelopeChunkKey(job.submittedAt, job.submissionId, i),
  );
  const parts: Uint8Array<ArrayBuffer>[] = [];
  for (let i = 0; i < keys.length; i += 10) {
    for (const entry of await db.kv.getMany<Uint8Array<ArrayBuffer>[]>(keys.slice(i, i + 10))) {
      if (entry.value === null) return null;
      parts.push(entry.value);
    }
  }
  const sealed = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    sealed.set(part, offset);
    offset += part.length;
  }
  return sealed;
}

/** Recent outcomes of a form, newest first. */
export async function listOutcomes(
  db: Db,
  formId: string,
  limit: number,
): Promise<DeliveryOutcome[]> {
  const outcomes: DeliveryOutcome[] = [];
  const iter = db.kv.list<DeliveryOutcome>({ prefix: ["deliveries", formId] }, {
    reverse: true,
    limit,
  });
  for await (const entry of iter) outcomes.push(entry.value);
  return outcomes;
}

/** The outcome record of a job at its latest state. */
export function outcomeOf(
  job: JobRecord,
  status: DeliveryOutcome["status"],
  detail: string | null = null,
): DeliveryOutcome {
  return {
    submissionId: job.submissionId,
    destinationId: job.destinationId,
    destinationType: job.type,
    status,
    attempts: job.attempts,
    lastError: job.lastError,
    lastStatusCode: job.lastStatusCode,
    detail,
    submittedAt: new Date(job.submittedAt).toISOString(),
    updatedAt: new Date(job.updatedAt).toISOString(),
    nextAttemptAt: status === "retrying" ? new Date(job.dueAt).toISOString() : null,
  };
}

/** A job claimed by this worker: the record and the versionstamp that proves the lease. */
export interface ClaimedJob {
  job: JobRecord;
  versionstamp: string;
}

/**
 * Claims a job that is due (pending past `dueAt`, or in flight past its lease) with an
 * atomic versionstamp check; null when it is gone, not due, or another worker won.
 */
export async function claimJob(
  db: Db,
  ref: JobRef,
  options: { now: number; leaseMs: number },
): Promise<ClaimedJob | null> {
  const entry = await db.kv.get<JobRecord>(jobKey(ref));
  if (entry.value === null || entry.value.dueAt > options.now) return null;
  const current = entry.value;
  const job: JobRecord = {
    ...current,
    state: "in_flight",
    attempts: current.attempts + 1,
    dueAt: options.now + options.leaseMs,
    updatedAt: options.now,
  };
  const commit = await db.kv.atomic().check(entry).set(jobKey(job), job).commit();
  return commit.ok ? { job, versionstamp: commit.versionstamp } : null;
}


/**
 * Puts a claimed job back to pending until `job.dueAt` after a transient failure.
 * False when the lease was lost to another worker.
 */
export async function rescheduleJob(
  db: Db,
  claimed: ClaimedJob,
  next: JobRecord,
  options: { wakeUp: WakeUp | null },
): Promise<boolean> {
  const { job } = claimed;
  const op = db.kv.atomic()
    .check({ key: jobKey(job), versionstamp: claimed.versionstamp })
    .set(jobKey(next), next)
    .set(outcomeKey(next), outcomeOf(next, "retrying"), { expireIn: OUTCOME_TTL_MS });
  if (options.wakeUp) op.enqueue(options.wakeUp.message, { delay: options.wakeUp.delayMs });
  return (await op.commit()).ok;
}

/** A queue wake-up to send with a commit. */
export interface WakeUp {
  message: unknown;
  delayMs: number;
}

/**
 * Ends a claimed job: deletes it, records its final outcome and, when it was the
 * submission's last job, deletes the sealed envelope in the same commit. Sibling jobs
 * are checked so that of two jobs finishing at once, the later commit sees the other
 * gone. False when the lease was lost to another worker.
 */
export async function finishJob(
  db: Db,
  claimed: ClaimedJob,
  outcome: DeliveryOutcome,
): Promise<boolean> {
  const { job } = claimed;
  for (let attempt = 0; attempt < 20; attempt++) {
    const op = db.kv.atomic()
      .check({ key: jobKey(job), versionstamp: claimed.versionstamp })
      .delete(jobKey(job))
      .set(outcomeKey(job), outcome, { expireIn: OUTCOME_TTL_MS });
    let siblings = 0;
    const family = { prefix: ["jobs", job.submittedAt, job.submissionId] };
    for await (const sibling of db.kv.list(family)) {
      if (sibling.key[3] === job.destinationId) continue;
      op.check(sibling);
      siblings++;
    }
    if (siblings === 0) {
      for (let i = 0; i < job.chunks; i++) op.delete(envelopeChunkKey(job.submittedAt, job.submissionId, i));
    }
    if ((await op.commit()).ok) return true;
    const mine = await db.kv.get(jobKey(job));
    if (mine.versionstamp !== claimed.versionstamp) return false;
  }
  return false;
}

/** Jobs due by `now` (pending ones and expired leases), at most `limit`. */
export async function listDueJobs(db: Db, now: number, limit: number): Promise<JobRef[]> {
  const refs: JobRef[] = [];
  for await (const entry of db.kv.list<JobRecord>({ prefix: ["jobs"] }, { batchSize: 500 })) {
    if (entry.value.dueAt > now) continue;
    const { submittedAt, submissionId, destinationId } = entry.value;
    refs.push({ submittedAt, submissionId, destinationId });
    if (refs.length >= limit) break;
  }
  return refs;
}
