/**
 * The submission envelope from acceptance to deletion, in one place: what it holds,
 * how it is sealed (AES-256-GCM, bound to its submission id), how long it may live,
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

/** The submission as delivered to every destination (spec section 2.4). */
export interface SubmissionEnvelope {
  submissionId: string;
  formId: string;
  formName: string;
  payload: unknown;
  metadata: {
    origin: string | null;
    ip: string | null;
    userAgent: string | null;
    referer: string | null;
    submittedAt: string;
  };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Seals an envelope for storage, bound to its submission id. */
export async function sealEnvelope(
  sealer: Sealer,
  envelope: SubmissionEnvelope,
): Promise<Uint8Array<ArrayBuffer>> {
  const plaintext = encoder.encode(JSON.stringify(envelope));
  return await sealer.seal(plaintext, `envelope:${envelope.submissionId}`);
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

/** Adds the deletion of a submission's envelope chunks to an operation. */
export function deleteChunks(
  op: Deno.AtomicOperation,
  job: Pick<JobRecord, "submittedAt" | "submissionId" | "chunks">,
): void {
  for (let i = 0; i < job.chunks; i++) {
    op.delete(envelopeChunkKey(job.submittedAt, job.submissionId, i));
  }
}
