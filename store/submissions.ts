import type { Db } from "./db.ts";
import type { DestinationType } from "./destinations.ts";
import {
  ENVELOPE_CHUNK_BYTES,
  envelopeChunkKey,
  jobKey,
  type JobRecord,
  type JobRef,
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

/** Wake-up message for the jobs of one submission. */
export interface WakeMessage {
  wake: { submittedAt: number; submissionId: string; destinationIds: string[] };
}

/** KV's atomic limits are 1000 mutations and 800 KiB; stay clear of both. */
const MAX_BATCH_MUTATIONS = 900;
const MAX_BATCH_BYTES = 640 * 1024;
const JOB_BYTES_ESTIMATE = 600;

interface Pending {
  submission: NewSubmission;
  mutations: number;
  bytes: number;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * Writes accepted submissions with group commit: each submission's envelope chunks,
 * jobs, due-index entries and wake-ups go in one atomic commit, and submissions that
 * arrive while a commit is running share the next one instead of paying an fsync
 * each. A batch whose commit fails is retried one submission at a time, so one bad
 * submission never fails the others.
 */
export function createSubmissionWriter(db: Db, options: { queues: boolean }): SubmissionWriter {
  const waiting: Pending[] = [];
  let committing = false;

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
        lastError: null,
        lastStatusCode: null,
        submittedAt: s.submittedAt,
        updatedAt: s.submittedAt,
      };
      op.set(jobKey(job), job);
    }
    if (options.queues) {
      const message: WakeMessage = {
        wake: {
          submittedAt: s.submittedAt,
          submissionId: s.submissionId,
          destinationIds: s.destinations.map((d) => d.id),
        },
      };
      op.enqueue(message);
    }
  }

  async function commit(batch: Pending[]): Promise<boolean> {
    const op = db.kv.atomic();
    for (const pending of batch) addTo(op, pending.submission);
    try {
      return (await op.commit()).ok;
    } catch {
      return false;
    }
  }

  async function drain() {
    committing = true;
    while (waiting.length > 0) {
      const batch: Pending[] = [];
      let mutations = 0;
      let bytes = 0;
      while (waiting.length > 0) {
        const next = waiting[0];
        const fits = mutations + next.mutations <= MAX_BATCH_MUTATIONS &&
          bytes + next.bytes <= MAX_BATCH_BYTES;
        if (batch.length > 0 && !fits) break;
        batch.push(waiting.shift()!);
        mutations += next.mutations;
        bytes += next.bytes;
      }
      if (await commit(batch)) {
        for (const pending of batch) pending.resolve();
      } else if (batch.length === 1) {
        batch[0].reject(new Error("Cannot store the submission: KV commit failed"));
      } else {
        for (const pending of batch) {
          if (await commit([pending])) pending.resolve();
          else pending.reject(new Error("Cannot store the submission: KV commit failed"));
        }
      }
    }
    committing = false;
  }

  return {
    write(submission: NewSubmission): Promise<void> {
      const jobs = submission.destinations.length;
      const chunks = Math.ceil(submission.sealedEnvelope.length / ENVELOPE_CHUNK_BYTES);
      return new Promise<void>((resolve, reject) => {
        waiting.push({
          submission,
          mutations: chunks + jobs + (options.queues ? 1 : 0),
          bytes: submission.sealedEnvelope.length + jobs * JOB_BYTES_ESTIMATE,
          resolve,
          reject,
        });
        if (!committing) drain();
      });
    },
  };
}

/** Stores accepted submissions. */
export interface SubmissionWriter {
  /** Stores one submission; resolves once its commit succeeded, rejects if it failed. */
  write(submission: NewSubmission): Promise<void>;
}

/** Type guard for wake-up messages from the KV queue. */
export function isWakeMessage(value: unknown): value is WakeMessage {
  const wake = (value as WakeMessage | null)?.wake;
  return typeof wake?.submissionId === "string" && typeof wake.submittedAt === "number" &&
    Array.isArray(wake.destinationIds) &&
    wake.destinationIds.every((id) => typeof id === "string");
}

/** The job refs a wake-up message names. */
export function wakeRefs(message: WakeMessage): JobRef[] {
  const { submittedAt, submissionId, destinationIds } = message.wake;
  return destinationIds.map((destinationId) => ({ submittedAt, submissionId, destinationId }));
}
