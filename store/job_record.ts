/**
 * Delivery jobs as records: one per (submission, enabled destination), the durable
 * truth of delivery, and their compact stored form. A job is pending (waiting for
 * `dueAt`) or in flight (leased until `dueAt`); when it reaches a final state it is
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

/** Rough size of a job or outcome record, for commit batching. */
export const JOB_BYTES = 600;

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

/** A job as this process last wrote it, with the versionstamp of that commit. */
export interface KnownJob {
  job: JobRecord;
  versionstamp: string;
}

/** A job claimed by this worker: the record and the versionstamp that proves the lease. */
export interface ClaimedJob {
  job: JobRecord;
  versionstamp: string;
  /** The first sealed envelope chunk as read with the job; null when it is gone. */
  firstChunk: Uint8Array<ArrayBuffer> | null;
}
