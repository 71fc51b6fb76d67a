/**
 * The submission envelope (submission.ts) from acceptance to deletion: how it is sealed (AES-256-GCM, bound to its submission id), how long it may live,
 * and how its sealed bytes are kept in KV (chunks under the 64 KiB value limit, written
 * with the jobs by store/submissions.ts, read by a claimed job, deleted when the last
 * job ends: store/envelope_cleanup.ts). Ingestion seals and stores with it; the
 * delivery engine reads and opens with it.
 *
 * @module
 */
import { concatBytes } from "../bytes.ts";
import type { Db } from "./db.ts";
import type { ClaimedJob, JobRecord } from "./job_record.ts";
import { envelopeChunkKey } from "./keys.ts";
import type { Sealer } from "./sealing.ts";
import type { SubmissionEnvelope } from "../submission.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Seals an envelope for storage, bound to its submission id; its JSON comes back too, for
 * this process's own delivery (claim hints): never stored.
 */
export async function sealEnvelope(
  sealer: Sealer,
  envelope: SubmissionEnvelope,
): Promise<{ sealed: Uint8Array<ArrayBuffer>; json: string }> {
  const json = JSON.stringify(envelope);
  const sealed = await sealer.seal(encoder.encode(json), `envelope:${envelope.submissionId}`);
  return { sealed, json };
}

/** Opens an envelope sealed by sealEnvelope. */
export async function openEnvelope(
  sealer: Sealer,
  submissionId: string,
  sealed: Uint8Array<ArrayBuffer>,
): Promise<SubmissionEnvelope> {
  const plaintext = await sealer.open(sealed, `envelope:${submissionId}`);
  return JSON.parse(decoder.decode(plaintext));
}

/**
 * A claimed job's envelope before it is opened: its sealed bytes, or its JSON when this
 * process stored it (a claim hint), which needs no read and no open.
 */
export type EnvelopeData = Uint8Array<ArrayBuffer> | string;

/** Opens a claimed job's envelope (readEnvelopeData), sealed or not. */
export async function openEnvelopeData(
  sealer: Sealer,
  submissionId: string,
  data: EnvelopeData,
): Promise<SubmissionEnvelope> {
  return typeof data === "string"
    ? JSON.parse(data)
    : await openEnvelope(sealer, submissionId, data);
}

/**
 * How long a sealed envelope may outlive its acceptance: every retry of the schedule
 * (with its +20 % jitter), every lease, and a day spare. Its KV entries carry this TTL
 * as a safety net, and a held job's data expires with it.
 */
export function envelopeTtlMs(scheduleMs: number[], leaseMs: number): number {
  const retries = scheduleMs.reduce((sum, ms) => sum + ms * 1.2, 0);
  return Math.ceil(retries + (scheduleMs.length + 1) * leaseMs + 24 * 3600 * 1000);
}

/** Largest sealed chunk: below KV's 64 KiB value limit with room for the encoding. */
const ENVELOPE_CHUNK_BYTES = 60_000;

/** Splits sealed bytes into chunks that each fit in a KV value. */
export function splitChunks(sealed: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer>[] {
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  for (let i = 0; i < sealed.length; i += ENVELOPE_CHUNK_BYTES) {
    chunks.push(sealed.subarray(i, i + ENVELOPE_CHUNK_BYTES));
  }
  return chunks;
}

/**
 * Splits resealed bytes into exactly `count` chunks, as the jobs of the submission
 * count them: the last takes what is left (a few header bytes more than a full chunk at
 * most, still below the KV value limit).
 */
export function splitChunksInto(
  sealed: Uint8Array<ArrayBuffer>,
  count: number,
): Uint8Array<ArrayBuffer>[] {
  const chunks = splitChunks(sealed).slice(0, count);
  const rest = sealed.subarray((count - 1) * ENVELOPE_CHUNK_BYTES);
  chunks[count - 1] = rest;
  return chunks;
}

/**
 * A claimed job's envelope: its JSON when the claim came with it (this process stored
 * it), else its sealed chunks read and joined (the first came with the claim); null when
 * any is missing (expired or deleted). A longer envelope's chunks are read again
 * together until they all come from one commit: a reseal (store/reseal.ts) may rewrite
 * them between two reads.
 */
export async function readEnvelopeData(
  db: Db,
  claimed: ClaimedJob,
): Promise<EnvelopeData | null> {
  const { job, envelope } = claimed;
  if (envelope === null || typeof envelope === "string" || job.chunks === 1) return envelope;
  const keys = Array.from(
    { length: job.chunks },
    (_, i) => envelopeChunkKey(job.submittedAt, job.submissionId, i),
  );
  for (let tries = 0;; tries++) {
    const entries: Deno.KvEntryMaybe<Uint8Array<ArrayBuffer>>[] = [];
    for (let i = 0; i < keys.length; i += 10) {
      entries.push(...await db.kv.getMany<Uint8Array<ArrayBuffer>[]>(keys.slice(i, i + 10)));
    }
    if (entries.some((entry) => entry.value === null)) return null;
    const stamps = new Set(entries.map((entry) => entry.versionstamp));
    // Every chunk is written in one commit, so one commit's chunks share a versionstamp.
    if (stamps.size === 1 || tries >= 5) {
      return concatBytes(entries.map((entry) => entry.value!));
    }
  }
}

/** Adds the deletion of a submission's envelope chunks to an operation. */
export function deleteChunks(
  op: Deno.AtomicOperation,
  job: Pick<JobRecord, "submittedAt" | "submissionId" | "chunks">,
): void {
  for (let i = 0; i < job.chunks; i++) {
    op.delete(envelopeChunkKey(job.submittedAt, job.submissionId, i));
  }
}
