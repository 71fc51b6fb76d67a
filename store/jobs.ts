import { concatBytes } from "../bytes.ts";
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
  /** Destination ids of every job of the submission, this one included (absent on old records). */
  family?: string[];
  lastError: string | null;
  lastStatusCode: number | null;
  /** Epoch ms of acceptance. */
  submittedAt: number;
  updatedAt: number;
}

/**
 * A job as stored. Its key already holds submittedAt, submissionId and destinationId;
 * the value holds the rest as a tuple, without field names: 206 bytes instead of 430
 * as an object. Jobs are most of the bytes a submission commits, and a file-backed
 * KV's commit cost follows the pages it writes. Records stored as JobRecord objects
 * (by earlier versions) are still read.
 */
export type StoredJob = [
  formId: string,
  orgId: string,
  type: DestinationType,
  state: JobRecord["state"],
  attempts: number,
  dueAt: number,
  chunks: number,
  family: string[] | undefined,
  lastError: string | null,
  lastStatusCode: number | null,
  updatedAt: number,
];

/** The stored form of a job (see StoredJob); its key is jobKey(job). */
export function encodeJob(job: JobRecord): StoredJob {
  return [
    job.formId,
    job.orgId,
    job.type,
    job.state,
    job.attempts,
    job.dueAt,
    job.chunks,
    job.family,
    job.lastError,
    job.lastStatusCode,
    job.updatedAt,
  ];
}

/** A job read back from its KV entry. */
export function decodeJob(entry: { key: Deno.KvKey; value: StoredJob | JobRecord }): JobRecord {
  const { key, value } = entry;
  if (!Array.isArray(value)) return value;
  const [, submittedAt, submissionId, destinationId] = key as ReturnType<typeof jobKey>;
  const [
    formId,
    orgId,
    type,
    state,
    attempts,
    dueAt,
    chunks,
    family,
    lastError,
    lastStatusCode,
    updatedAt,
  ] = value;
  return {
    submissionId,
    destinationId,
    formId,
    orgId,
    type,
    state,
    attempts,
    dueAt,
    chunks,
    family,
    lastError,
    lastStatusCode,
    submittedAt,
    updatedAt,
  };
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

/** Rough size of a job or outcome record, for commit batching. */
export const JOB_BYTES = 600;

/** Largest sealed chunk: below KV's 64 KiB value limit with room for the encoding. */
const ENVELOPE_CHUNK_BYTES = 60_000;

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
const outcomeKey = (
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

/** A queue wake-up for jobs: compact [submittedAt, submissionId, destinationId] tuples. */
export interface WakeMessage {
  wake: [number, string, string][];
}

/** Most jobs one wake-up message names, well within the 64 KiB message limit. */
export const MAX_WAKE_REFS = 400;

/** The wake-up message for some jobs. */
export function wakeMessage(refs: JobRef[]): WakeMessage {
  return { wake: refs.map((r) => [r.submittedAt, r.submissionId, r.destinationId]) };
}

/** Type guard for wake-up messages read from the KV queue. */
export function isWakeMessage(value: unknown): value is WakeMessage {
  const wake = (value as WakeMessage | null)?.wake;
  return Array.isArray(wake) &&
    wake.every((r) =>
      Array.isArray(r) && typeof r[0] === "number" && typeof r[1] === "string" &&
      typeof r[2] === "string"
    );
}

/** The jobs a wake-up message names. */
export function wakeRefs(message: WakeMessage): JobRef[] {
  return message.wake.map(([submittedAt, submissionId, destinationId]) => ({
    submittedAt,
    submissionId,
    destinationId,
  }));
}

/** Splits sealed bytes into chunks that each fit in a KV value. */
export function splitChunks(sealed: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer>[] {
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  for (let i = 0; i < sealed.length; i += ENVELOPE_CHUNK_BYTES) {
    chunks.push(sealed.subarray(i, i + ENVELOPE_CHUNK_BYTES));
  }
  return chunks;
}

/**
 * Reads and joins the sealed envelope chunks of a claimed job (the first came with
 * the claim); null when any is missing (expired or deleted).
 */
export async function readSealedEnvelope(
  db: Db,
  claimed: ClaimedJob,
): Promise<Uint8Array<ArrayBuffer> | null> {
  const { job, firstChunk } = claimed;
  if (firstChunk === null) return null;
  if (job.chunks === 1) return firstChunk;
  const keys = Array.from(
    { length: job.chunks - 1 },
    (_, i) => envelopeChunkKey(job.submittedAt, job.submissionId, i + 1),
  );
  const parts = [firstChunk];
  for (let i = 0; i < keys.length; i += 10) {
    for (const entry of await db.kv.getMany<Uint8Array<ArrayBuffer>[]>(keys.slice(i, i + 10))) {
      if (entry.value === null) return null;
      parts.push(entry.value);
    }
  }
  return concatBytes(parts);
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
  /** The first sealed envelope chunk as read with the job; null when it is gone. */
  firstChunk: Uint8Array<ArrayBuffer> | null;
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
  // The job and the first envelope chunk in one read: the delivery needs both.
  const [entry, firstChunk] = await db.kv.getMany<[StoredJob, Uint8Array<ArrayBuffer>]>([
    jobKey(ref),
    envelopeChunkKey(ref.submittedAt, ref.submissionId, 0),
  ]);
  if (entry.value === null || entry.versionstamp === null) return null;
  const job = decodeJob({ key: entry.key, value: entry.value });
  return await claimKnownJob(db, { job, versionstamp: entry.versionstamp }, {
    ...options,
    firstChunk: firstChunk.value,
  });
}

/** A job as this process last wrote it, with the versionstamp of that commit. */
export interface KnownJob {
  job: JobRecord;
  versionstamp: string;
}

/**
 * Claims a job whose state this process knows (it has just accepted the submission),
 * without reading it: the versionstamp check fails, and null comes back, if anyone
 * changed the job since. `firstChunk` is the envelope's first sealed chunk.
 */
export async function claimKnownJob(
  db: Db,
  known: KnownJob,
  options: { now: number; leaseMs: number; firstChunk: Uint8Array<ArrayBuffer> | null },
): Promise<ClaimedJob | null> {
  const current = known.job;
  if (current.dueAt > options.now) return null;
  const job: JobRecord = {
    ...current,
    state: "in_flight",
    attempts: current.attempts + 1,
    dueAt: options.now + options.leaseMs,
    updatedAt: options.now,
  };
  const key = jobKey(job);
  const versionstamp = await db.batcher.commit({
    apply: (op) => op.check({ key, versionstamp: known.versionstamp }).set(key, encodeJob(job)),
    mutations: 1,
    checks: 1,
    bytes: JOB_BYTES,
  });
  return versionstamp === null ? null : { job, versionstamp, firstChunk: options.firstChunk };
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
  const versionstamp = await db.batcher.commit({
    apply(op) {
      op.check({ key: jobKey(job), versionstamp: claimed.versionstamp })
        .set(jobKey(next), encodeJob(next))
        .set(outcomeKey(next), outcomeOf(next, "retrying"), { expireIn: OUTCOME_TTL_MS });
      if (options.wakeUp) op.enqueue(options.wakeUp.message, { delay: options.wakeUp.delayMs });
    },
    mutations: 3,
    checks: 1,
    bytes: 2 * JOB_BYTES,
  });
  return versionstamp !== null;
}

/** A queue wake-up to send with a commit. */
export interface WakeUp {
  message: unknown;
  delayMs: number;
}

/**
 * What happens to the sealed envelope when a job ends: deleted in the same commit
 * (every sibling job is known to be finished), or marked for a check after the commit
 * (whether any sibling is left can only be known once this commit is in).
 */
export type EnvelopeCleanup = "delete" | "check";

/**
 * Ends a claimed job: deletes it and records its final outcome, and deletes the
 * envelope or leaves a marker for the check that follows (deleteEnvelopeIfLast). The
 * marker outlives a crash between the two commits, so the sweep can finish the check
 * (sweepEnvelopeMarkers). False when the lease was lost.
 */
export async function finishJob(
  db: Db,
  claimed: ClaimedJob,
  outcome: DeliveryOutcome,
  cleanup: EnvelopeCleanup,
): Promise<boolean> {
  const { job } = claimed;
  const versionstamp = await db.batcher.commit({
    apply(op) {
      op.check({ key: jobKey(job), versionstamp: claimed.versionstamp })
        .delete(jobKey(job))
        .set(outcomeKey(job), outcome, { expireIn: OUTCOME_TTL_MS });
      if (cleanup === "delete") deleteChunks(op, job);
      else op.set(markerKey(job), { chunks: job.chunks, markedAt: Date.now() });
    },
    mutations: 3 + (cleanup === "delete" ? job.chunks : 0),
    checks: 1,
    bytes: 2 * JOB_BYTES,
  });
  return versionstamp !== null;
}

/** A finished job's note that the envelope may have to go (see finishJob). */
const markerKey = (ref: JobRef): ["envelope_checks", number, string, string] => [
  "envelope_checks",
  ref.submittedAt,
  ref.submissionId,
  ref.destinationId,
];

function deleteChunks(
  op: Deno.AtomicOperation,
  job: Pick<JobRecord, "submittedAt" | "submissionId" | "chunks">,
) {
  for (let i = 0; i < job.chunks; i++) {
    op.delete(envelopeChunkKey(job.submittedAt, job.submissionId, i));
  }
}

/**
 * The check after a finishing commit: deletes the envelope when no job of the
 * submission is left, and the job's marker either way. Of sibling jobs finishing at
 * once, the last to commit always sees none left (a second delete is harmless).
 */
export async function deleteEnvelopeIfLast(
  db: Db,
  job: JobRef & Pick<JobRecord, "chunks">,
): Promise<void> {
  const left = db.kv.list({ prefix: ["jobs", job.submittedAt, job.submissionId] }, { limit: 1 });
  let last = true;
  for await (const _ of left) last = false;
  await db.batcher.commit({
    apply(op) {
      op.delete(markerKey(job));
      if (last) deleteChunks(op, job);
    },
    mutations: 1 + (last ? job.chunks : 0),
  });
}

/**
 * Finishes the envelope checks that a crash interrupted: markers older than
 * `olderThanMs` (younger ones belong to checks under way).
 */
export async function sweepEnvelopeMarkers(
  db: Db,
  options: { now: number; olderThanMs: number; limit: number },
): Promise<number> {
  let checked = 0;
  const markers = db.kv.list<{ chunks: number; markedAt: number }>({
    prefix: ["envelope_checks"],
  }, { limit: options.limit });
  for await (const entry of markers) {
    if (entry.value.markedAt > options.now - options.olderThanMs) continue;
    const [, submittedAt, submissionId, destinationId] = entry.key as [
      string,
      number,
      string,
      string,
    ];
    await deleteEnvelopeIfLast(db, {
      submittedAt,
      submissionId,
      destinationId,
      chunks: entry.value.chunks,
    });
    checked++;
  }
  return checked;
}

/**
 * Jobs due by `now` (pending ones and expired leases), oldest first, at most `limit`,
 * passing over those `skip` names (already woken).
 */
export async function listDueJobs(
  db: Db,
  options: { now: number; limit: number; skip?: (ref: JobRef) => boolean },
): Promise<JobRef[]> {
  const refs: JobRef[] = [];
  for await (const entry of db.kv.list<StoredJob>({ prefix: ["jobs"] }, { batchSize: 500 })) {
    const job = decodeJob(entry);
    if (job.dueAt > options.now || options.skip?.(job)) continue;
    const { submittedAt, submissionId, destinationId } = job;
    refs.push({ submittedAt, submissionId, destinationId });
    if (refs.length >= options.limit) break;
  }
  return refs;
}
