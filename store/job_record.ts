/**
 * Delivery jobs as records: one per (submission, enabled destination), the durable
 * truth of delivery, and their compact stored form. A job is pending (waiting for
 * `dueAt`), in flight (leased until `dueAt`) or held (its destination is paused for
 * health: not attempted; `dueAt` is when to look again); when it reaches a final state it is
 * deleted and its outcome stays in `deliveries` for 30 days (outcomes.ts). Only
 * unfinished jobs exist, so the sweep finds due ones by scanning them all: no due-time
 * index to keep, which halves the writes per submission.
 *
 * @module
 */
import type { DestinationType } from "../connectors/registry.ts";
import { type JobKeyParts, jobKeyParts } from "./keys.ts";

/** A delivery job. */
export interface JobRecord {
  submissionId: string;
  destinationId: string;
  formId: string;
  orgId: string;
  type: DestinationType;
  state: "pending" | "in_flight" | "held";
  attempts: number;
  /** Epoch ms: next attempt when pending, lease expiry when in flight, next look when held. */
  dueAt: number;
  /** Number of sealed envelope chunks of the submission. */
  chunks: number;
  /**
   * Destination ids of every job of the submission, this one included; absent on a
   * retained failure restored for redelivery (its siblings ended long ago).
   */
  family?: string[];
  lastError: string | null;
  lastStatusCode: number | null;
  /** Epoch ms of acceptance. */
  submittedAt: number;
  updatedAt: number;
  /**
   * A tenant asked for this one delivery (redelivery.ts): it is attempted even while
   * its destination is paused, as a probe before resuming it.
   */
  redelivered?: boolean;
}

/**
 * A job's identity (its key's parts) and its organization, as carried by wake-up
 * messages: enough to dispatch it fairly without reading it.
 */
export type JobRef = JobKeyParts & { orgId: string };

/** A job's identity as one string, for in-memory sets and maps. */
export function refKey(ref: JobKeyParts): string {
  return `${ref.submissionId}/${ref.destinationId}`;
}

/**
 * A job as stored. Its key already holds submittedAt, submissionId and destinationId;
 * the value holds the rest as a tuple, without field names: half the bytes of an object
 * (docs/design.md). Jobs are most of the bytes a submission commits, and a file-backed
 * KV's commit cost follows the pages it writes.
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
  redelivered?: true,
];

/** Rough size of a job or outcome record, for commit batching. */
export const JOB_BYTES = 600;

/** The stored form of a job (see StoredJob); its key is jobKey(job). */
export function encodeJob(job: JobRecord): StoredJob {
  const stored: StoredJob = [
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
  // Only when set: most jobs stay one element shorter.
  if (job.redelivered) stored.push(true);
  return stored;
}

/** A job read back from its KV entry. */
export function decodeJob(entry: { key: Deno.KvKey; value: StoredJob }): JobRecord {
  const { key, value } = entry;
  const { submittedAt, submissionId, destinationId } = jobKeyParts(key);
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
    redelivered,
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
    ...(redelivered ? { redelivered } : {}),
  };
}

/** A job as this process last wrote it, with the versionstamp of that commit. */
export interface KnownJob {
  job: JobRecord;
  versionstamp: string;
}

/** A job claimed by this worker: the record and the versionstamp that proves the lease. */
export interface ClaimedJob {
  job: JobRecord;
  versionstamp: string;
  /**
   * The envelope's first sealed chunk as read with the job (null when it is gone), or its
   * whole JSON when this process stored the submission (a claim hint).
   */
  envelope: Uint8Array<ArrayBuffer> | string | null;
  /**
   * The job has no by-destination index entry to delete when it ends: it is as this
   * process stored it, pending, and was never put back (submissions.ts).
   */
  unindexed?: true;
}
