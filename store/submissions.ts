import type { Db } from "./db.ts";
import type { DestinationType } from "./destinations.ts";
import {
  ENVELOPE_CHUNK_BYTES,
  envelopeChunkKey,
  jobKey,
  type JobRecord,
  splitChunks,
} from "./jobs.ts";

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

const JOB_BYTES_ESTIMATE = 600;

/**
 * Writes accepted submissions: each submission's envelope chunks, jobs and wake-up go
 * in one atomic commit, shared with whatever else is being committed at that moment
 * (db.batcher), so concurrent submissions do not pay a sync each.
 */
export function createSubmissionWriter(db: Db): SubmissionWriter {
  function addTo(op: Deno.AtomicOperation, s: NewSubmission) {
    const chunks = splitChunks(s.sealedEnvelope);
    chunks.forEach((chunk, i) => {
      op.set(envelopeChunkKey(s.submittedAt, s.submissionId, i), chunk, {
        expireIn: s.envelopeTtlMs,
      });
    });
    for (const destination of s.destinations) {
      const job: JobRecord = {
        submissionId: s.submissionId,
        destinationId: destination.id,
        formId: s.formId,
        orgId: s.orgId,
        type: destination.type,
        state: "pending",
        attempts: 0,
        dueAt: s.submittedAt,
        chunks: chunks.length,
        family: s.destinations.map((d) => d.id),
        lastError: null,
        lastStatusCode: null,
        submittedAt: s.submittedAt,
        updatedAt: s.submittedAt,
      };
      op.set(jobKey(job), job);
    }
  }

  return {
    async write(submission: NewSubmission): Promise<void> {
      const jobs = submission.destinations.length;
      const chunks = Math.ceil(submission.sealedEnvelope.length / ENVELOPE_CHUNK_BYTES);
      const versionstamp = await db.batcher.commit({
        apply: (op) => addTo(op, submission),
        mutations: chunks + jobs,
        bytes: submission.sealedEnvelope.length + jobs * JOB_BYTES_ESTIMATE,
        wake: submission.destinations.map((d) => ({
          submittedAt: submission.submittedAt,
          submissionId: submission.submissionId,
          destinationId: d.id,
        })),
      });
      if (versionstamp === null) throw new Error("Cannot store the submission: KV commit failed");
    },
  };
}

/** Stores accepted submissions. */
export interface SubmissionWriter {
  /** Stores one submission; resolves once its commit succeeded, rejects if it failed. */
  write(submission: NewSubmission): Promise<void>;
}
