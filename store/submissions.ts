/**
 * Storing accepted submissions: the sealed envelope's chunks and one job per enabled
 * destination, with their queue wake-up, in one group commit.
 *
 * @module
 */
import type { Db } from "./db.ts";
import type { DestinationType } from "../connectors/registry.ts";
import { splitChunks } from "./envelope_chunks.ts";
import { encodeJob, JOB_BYTES, type JobRecord, type KnownJob } from "./job_record.ts";
import { envelopeChunkKey, jobKey } from "./keys.ts";

/** An accepted submission ready to be stored: its sealed envelope and its jobs. */
export interface NewSubmission {
  submissionId: string;
  formId: string;
  orgId: string;
  sealedEnvelope: Uint8Array<ArrayBuffer>;
  destinations: { id: string; type: DestinationType }[];
  submittedAt: number;
  /** Safety-net lifetime of the sealed envelope. */
  envelopeTtlMs: number;
}

/**
 * Writes accepted submissions: each submission's envelope chunks, jobs and wake-up go
 * in one atomic commit, shared with whatever else is being committed at that moment
 * (db.batcher), so concurrent submissions do not pay a sync each.
 */
export function createSubmissionWriter(db: Db): SubmissionWriter {
  function jobsOf(s: NewSubmission, chunks: number): JobRecord[] {
    const family = s.destinations.map((d) => d.id);
    return s.destinations.map((destination) => ({
      submissionId: s.submissionId,
      destinationId: destination.id,
      formId: s.formId,
      orgId: s.orgId,
      type: destination.type,
      state: "pending",
      attempts: 0,
      dueAt: s.submittedAt,
      chunks,
      family,
      lastError: null,
      lastStatusCode: null,
      submittedAt: s.submittedAt,
      updatedAt: s.submittedAt,
    }));
  }

  return {
    async write(submission: NewSubmission): Promise<StoredSubmission> {
      const chunks = splitChunks(submission.sealedEnvelope);
      const jobs = jobsOf(submission, chunks.length);
      const versionstamp = await db.batcher.commit({
        apply(op) {
          chunks.forEach((chunk, i) => {
            const key = envelopeChunkKey(submission.submittedAt, submission.submissionId, i);
            op.set(key, chunk, { expireIn: submission.envelopeTtlMs });
          });
          for (const job of jobs) op.set(jobKey(job), encodeJob(job));
        },
        mutations: chunks.length + jobs.length,
        bytes: submission.sealedEnvelope.length + jobs.length * JOB_BYTES,
        wake: jobs,
      });
      if (versionstamp === null) throw new Error("Cannot store the submission: KV commit failed");
      return { jobs: jobs.map((job) => ({ job, versionstamp })), firstChunk: chunks[0] };
    },
  };
}

/** A stored submission: its jobs as written, so the engine can claim them without a read. */
export interface StoredSubmission {
  jobs: KnownJob[];
  firstChunk: Uint8Array<ArrayBuffer>;
}

/** Stores accepted submissions. */
export interface SubmissionWriter {
  /** Stores one submission; resolves once its commit succeeded, rejects if it failed. */
  write(submission: NewSubmission): Promise<StoredSubmission>;
}
