/**
 * Sealed envelope chunks: a submission's encrypted envelope split into pieces that each
 * fit in a KV value, written with the jobs, read back by a claimed job, deleted when
 * the last job ends (envelope_cleanup.ts).
 *
 * @module
 */
import { concatBytes } from "../bytes.ts";
import type { Db } from "./db.ts";
import type { ClaimedJob, JobRecord } from "./job_record.ts";
import { envelopeChunkKey } from "./keys.ts";

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
