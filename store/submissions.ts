/**
 * Storing accepted submissions: the sealed envelope's chunks and one job per enabled
 * destination, with their queue wake-up, in one group commit. The job of a destination
 * paused for health is stored held, with a `held` outcome and its by-destination index
 * entry, and not woken: a submission is never accepted into silence.
 *
 * @module
 */
import type { Db } from "./db.ts";
import type { DestinationType } from "../connectors/registry.ts";
import { splitChunks } from "./envelope.ts";
import { encodeJob, JOB_BYTES, type JobRecord, type KnownJob } from "./job_record.ts";
import {
  envelopeChunkKey,
  jobByDestinationKey,
  jobKey,
  outcomeKey,
  pageTokenUseKey,
} from "./keys.ts";
import { OUTCOME_TTL_MS, outcomeOf } from "./outcomes.ts";

/** How often a held job is looked at again (a resume that raced its holding is caught then). */
export const HELD_RECHECK_MS = 3600 * 1000;

/** When a held job is looked at next: within the hour, and at the latest when its data expires. */
export function heldDueAt(job: Pick<JobRecord, "submittedAt">, now: number, lifetimeMs: number) {
  return Math.min(now + HELD_RECHECK_MS, job.submittedAt + lifetimeMs);
}

/** An accepted submission ready to be stored: its sealed envelope and its jobs. */
export interface NewSubmission {
  submissionId: string;
  formId: string;
  orgId: string;
  sealedEnvelope: Uint8Array<ArrayBuffer>;
  /** Enabled destinations; `held` ones are paused for health. */
  destinations: { id: string; type: DestinationType; held?: boolean }[];
  submittedAt: number;
  /** Lifetime of the sealed envelope (and of held jobs), FAILED_RETENTION_HOURS not included. */
  envelopeTtlMs: number;
  /** The signature of the time-trap page token that let it through: recorded, good once. */
  pageToken?: string;
}

/** A submission's page token was used before (rules/spam.ts): it was not stored. */
export class PageTokenUsedError extends Error {
  constructor() {
    super("Page token used before");
  }
}

/** How long a page token's use is kept: as long as the token could be good (rules/spam.ts). */
const PAGE_TOKEN_USE_TTL_MS = 2 * 3600 * 1000;

/**
 * Writes accepted submissions: each submission's envelope chunks, jobs and wake-up go
 * in one atomic commit, shared with whatever else is being committed at that moment
 * (db.batcher), so concurrent submissions do not pay a sync each. With
 * `retainMs` (FAILED_RETENTION_HOURS) the envelope lives that much longer, so that a
 * delivery failing at the end of its retries can still be kept for redelivery.
 */
export function createSubmissionWriter(
  db: Db,
  options: { retainMs: number } = { retainMs: 0 },
): SubmissionWriter {
  /**
   * Page tokens in a commit under way here. Parts merged into one commit see the state
   * before it, so two uses of one token in one commit would both pass the check: the
   * second is refused here; across processes the check in the commit refuses it.
   */
  const tokensCommitting = new Set<string>();

  function jobsOf(s: NewSubmission, chunks: number): JobRecord[] {
    const family = s.destinations.map((d) => d.id);
    return s.destinations.map((destination) => ({
      submissionId: s.submissionId,
      destinationId: destination.id,
      formId: s.formId,
      orgId: s.orgId,
      type: destination.type,
      state: destination.held ? "held" : "pending",
      attempts: 0,
      dueAt: destination.held ? heldDueAt(s, s.submittedAt, s.envelopeTtlMs) : s.submittedAt,
      chunks,
      family,
      lastError: null,
      lastStatusCode: null,
      submittedAt: s.submittedAt,
      updatedAt: s.submittedAt,
    }));
  }

  return {
    async write(submission, { wokenHere } = {}) {
      const token = submission.pageToken === undefined
        ? null
        : pageTokenUseKey(submission.formId, submission.pageToken);
      if (token !== null) {
        if (tokensCommitting.has(token[2])) throw new PageTokenUsedError();
        tokensCommitting.add(token[2]);
      }
      try {
        return await writeSubmission(submission, { wokenHere, token });
      } finally {
        if (token !== null) tokensCommitting.delete(token[2]);
      }
    },
  };

  async function writeSubmission(
    submission: NewSubmission,
    { wokenHere, token }: { wokenHere?: boolean; token: Deno.KvKey | null },
  ): Promise<StoredSubmission> {
    const chunks = splitChunks(submission.sealedEnvelope);
    const jobs = jobsOf(submission, chunks.length);
    const held = jobs.filter((job) => job.state === "held");
    const expireIn = submission.envelopeTtlMs + options.retainMs;
    const versionstamp = await db.batcher.commit({
      apply(op) {
        chunks.forEach((chunk, i) => {
          const key = envelopeChunkKey(submission.submittedAt, submission.submissionId, i);
          op.set(key, chunk, { expireIn });
        });
        for (const job of jobs) op.set(jobKey(job), encodeJob(job));
        // A pending job gets its by-destination index entry when it is first put back
        // (jobs.ts): most are delivered before then, and the entry cost a quarter of
        // what storing a submission can take. A held one needs it now, for a resume.
        for (const job of held) {
          op.set(jobByDestinationKey(job), 0)
            .set(outcomeKey(job), outcomeOf(job, "held"), { expireIn: OUTCOME_TTL_MS });
        }
        if (token !== null) {
          op.check({ key: token, versionstamp: null })
            .set(token, true, { expireIn: PAGE_TOKEN_USE_TTL_MS });
        }
      },
      mutations: chunks.length + jobs.length + 2 * held.length + (token === null ? 0 : 1),
      checks: token === null ? 0 : 1,
      bytes: submission.sealedEnvelope.length + (jobs.length + held.length) * JOB_BYTES,
      wake: held.length === 0 ? jobs : jobs.filter((job) => job.state !== "held"),
      wokenHere,
    });
    if (versionstamp === null) {
      // The page token's check is a part's only one: its use was recorded before.
      if (token !== null) throw new PageTokenUsedError();
      throw new Error("Cannot store the submission: KV commit failed");
    }
    return { jobs: jobs.map((job) => ({ job, versionstamp })) };
  }
}

/** A stored submission: its jobs as written, so the engine can claim them without a read. */
export interface StoredSubmission {
  jobs: KnownJob[];
}

/** Stores accepted submissions. */
export interface SubmissionWriter {
  /**
   * Stores one submission; resolves once its commit succeeded, rejects if it failed.
   * With `wokenHere` the caller wakes the stored jobs itself (DeliveryEngine.wakeStored),
   * so this process's queue listener passes their wake-up over.
   */
  write(submission: NewSubmission, options?: { wokenHere?: boolean }): Promise<StoredSubmission>;
}
