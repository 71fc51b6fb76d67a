/**
 * The outcome step: what an attempt's result does to its job. Delivered and failed
 * are final (the job ends with its outcome, the envelope is cleaned up or, for a
 * failure with FAILED_RETENTION_HOURS, kept for redelivery); a transient failure with
 * retries left puts the job back until its next attempt; a refusal for rate (429 and the
 * like: the destination's pace holds its whole queue) puts it back uncounted, off the
 * retry schedule and out of the destination's health; a job whose destination is
 * paused is held (until resumed, at most as long as its data lives); a job cut short by
 * shutdown goes back at once, its attempt uncounted; a job the outbound budget refused
 * is deferred until it allows, its attempt uncounted. The destination's health hook
 * hears of every delivery and every failure.
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { DeliveryError } from "../connectors/types.ts";
import type { Db } from "../store/db.ts";
import { destinationExists } from "../store/destinations.ts";
import {
  deleteEnvelopeIfLast,
  type EnvelopeCleanup,
  type HeldSibling,
} from "../store/envelope_cleanup.ts";
import { type ClaimedJob, type JobRecord, type JobRef, refKey } from "../store/job_record.ts";
import { finishJob, rescheduleJob } from "../store/jobs.ts";
import type { JobKeyParts } from "../store/keys.ts";
import { outcomeOf } from "../store/outcomes.ts";
import { heldDueAt } from "../store/submissions.ts";
import { wakeMessage } from "../store/wake.ts";
import type { AttemptResult, SendResult } from "./attempt.ts";
import { MAX_RETRY_AFTER_MS, nextRetryDelay } from "./retry.ts";

/** What the outcome step needs. */
export interface OutcomeDeps {
  db: Db;
  config: Pick<Config, "retryScheduleMs" | "sweepIntervalMs">;
  /** Whether the KV offers queues (a retry's wake-up goes with its commit). */
  queues: boolean;
  now: () => number;
  /** How long a submission's data lives from acceptance (held jobs fail after it). */
  envelopeTtlMs: number;
  /** How long a failed delivery is kept for redelivery (FAILED_RETENTION_HOURS); 0 not. */
  retainMs: number;
  /** Wakes a job again in this process after `delayMs` (retries due before the next sweep). */
  wakeLater(ref: JobRef, delayMs: number): void;
  /**
   * The versionstamp of a job this process holds unfinished, sure to end it unless
   * someone else changes it first: claimed and its result not yet being recorded (the
   * lease's versionstamp), or stored here and not yet claimed (with a claim hint).
   * Undefined for any other job.
   */
  heldHere(ref: JobKeyParts): string | undefined;
  /**
   * Settles once this process has committed the job's claim or result, when one of them
   * is being committed now; undefined otherwise. A finishing job waits for its siblings'
   * before it decides the envelope's cleanup (envelopeCleanup).
   */
  committing?(ref: JobKeyParts): Promise<unknown> | undefined;
  /**
   * Called after every recorded delivery or failure, retries included (destination
   * health); not for refusals for rate, which say nothing of the destination's health.
   */
  onAttempt?: (job: JobRecord, result: SendResult) => void | Promise<void>;
  /** Called once a job has failed for good (owner notifications: notify/). */
  onFailed?: (job: JobRecord) => void;
}

/** One log line's fields per attempt: result, status and error; never payload. */
export type OutcomeFields = Record<string, unknown> & { result: string };

/** Records attempts' results. */
export interface OutcomeStep {
  /** Records what an attempt came to; returns the fields of its log line. */
  record(claimed: ClaimedJob, result: AttemptResult): Promise<OutcomeFields>;
  /** Puts a job whose attempt was cut short by shutdown back as due, its attempt uncounted. */
  handBack(claimed: ClaimedJob): Promise<void>;
  /** Whether this process ended the job lately (its queue wake-ups then cost no KV read). */
  finishedHere(ref: JobRef): boolean;
}

const RECENTLY_DONE_MAX = 50_000;
/**
 * When a job refused for rate without Retry-After is due again: its destination's pace
 * holds the queue at least this long; the job waits in the dispatcher for the rest.
 */
const RATE_LIMITED_DELAY_MS = 1000;
/** A deferred job waits at least this long, so a budget at its edge is not polled. */
const MIN_DEFER_MS = 1000;

/**
 * The fields of an attempt whose job changed under it: its destination deleted meanwhile
 * (with its form or organization), or taken over by another worker. Read only then, so
 * a host's log says which, at no cost to attempts that end as they should.
 */
async function leaseLost(db: Db, job: JobRecord): Promise<OutcomeFields> {
  return {
    result: "lease lost",
    error: await destinationExists(db, job.formId, job.destinationId)
      ? "Another worker took the job over"
      : "Its destination was deleted while it was being sent: nothing recorded",
  };
}

/** The other jobs of a job's submission (none known for records without `family`). */
function siblingsOf(job: JobRecord): JobKeyParts[] {
  const { submittedAt, submissionId } = job;
  return (job.family ?? [])
    .filter((destinationId) => destinationId !== job.destinationId)
    .map((destinationId) => ({ submittedAt, submissionId, destinationId }));
}

/** The outcome step of one engine. */
export function createOutcomeStep(deps: OutcomeDeps): OutcomeStep {
  const { db, config, now } = deps;
  // Jobs finished here lately, so that their queue wake-ups cost no KV read.
  const recentlyDone = new Set<string>();

  async function finish(
    claimed: ClaimedJob,
    status: "delivered" | "failed",
    result: { statusCode?: number; detail?: string; error?: string },
  ): Promise<OutcomeFields> {
    const job: JobRecord = {
      ...claimed.job,
      lastError: result.error ?? null,
      lastStatusCode: result.statusCode ?? null,
      updatedAt: now(),
    };
    const { retainMs } = deps;
    const settling = retainMs > 0 ? undefined : siblingsSettled(job);
    if (settling !== undefined) await settling;
    // With retention a sibling's failure may keep the envelope: always check.
    let cleanup = retainMs > 0 ? "check" : envelopeCleanup(job);
    const outcome = outcomeOf(job, status, result.detail ?? null);
    let finished = await finishJob(db, claimed, outcome, { cleanup, retainMs });
    if (!finished && typeof cleanup === "object") {
      // A sibling it was left to changed (another process took it): check instead.
      cleanup = "check";
      finished = await finishJob(db, claimed, outcome, { cleanup, retainMs });
    }
    if (!finished) return await leaseLost(db, job);
    if (recentlyDone.size >= RECENTLY_DONE_MAX) recentlyDone.clear();
    recentlyDone.add(refKey(job));
    if (cleanup === "check") await deleteEnvelopeIfLast(db, job, { retained: retainMs > 0 });
    if (status === "failed") deps.onFailed?.(job); // owner notifications
    return { result: status, statusCode: job.lastStatusCode, error: job.lastError };
  }

  /**
   * Holds a job whose destination is paused (or whose sealed data needs a key this
   * process lacks: `reason` says so): not attempted, its attempt uncounted, looked at
   * again within the hour; past its data's lifetime it fails.
   */
  async function hold(claimed: ClaimedJob, reason?: string): Promise<OutcomeFields> {
    const { job } = claimed;
    const at = now();
    if (at >= job.submittedAt + deps.envelopeTtlMs) {
      return await finish(claimed, "failed", {
        error: reason
          ? `Submission data expired while held (${reason})`
          : "Submission data expired while the destination was paused",
      });
    }
    const next: JobRecord = {
      ...job,
      state: "held",
      attempts: job.attempts - 1,
      dueAt: heldDueAt(job, at, deps.envelopeTtlMs),
      lastError: reason ?? job.lastError,
      updatedAt: at,
    };
    const ok = await rescheduleJob(db, claimed, next, { wakeUp: null });
    if (!ok) return await leaseLost(db, job);
    return { result: "held", ...(reason ? { error: reason } : {}) };
  }

  /**
   * Waits for the siblings whose claim or result this process is committing: a sibling
   * being claimed is about to be held, and one whose result is being committed is about
   * to be done here, so once they settle the cleanup is mostly decided without a check.
   * Only siblings that started committing before this job waits are waited for (the
   * engine marks a job's result as being committed right after this runs, synchronously),
   * so two siblings never wait for each other.
   */
  function siblingsSettled(job: JobRecord): Promise<unknown> | undefined {
    const { committing } = deps;
    if (committing === undefined) return undefined;
    const waits = siblingsOf(job).map(committing).filter((commit) => commit !== undefined);
    return waits.length === 0 ? undefined : Promise.allSettled(waits);
  }

  /**
   * How the envelope is cleaned up when a job ends: deleted in its finishing commit
   * when every sibling job already finished in this process; left to the unfinished
   * ones when this process holds each of them (see heldHere: they clean up when they
   * end; a submission's jobs usually run side by side, and this saves the check's
   * read and commit); else checked right after the commit (the last sibling to commit
   * deletes it). A job whose result is being recorded is not held any more, so of two
   * siblings ending at once at most one leaves the envelope to the other.
   */
  function envelopeCleanup(job: JobRecord): EnvelopeCleanup {
    if (job.family === undefined) return "check";
    const leaveTo: HeldSibling[] = [];
    for (const ref of siblingsOf(job)) {
      if (recentlyDone.has(refKey(ref))) continue;
      const versionstamp = deps.heldHere(ref);
      if (versionstamp === undefined) return "check";
      leaveTo.push({ ref, versionstamp });
    }
    return leaveTo.length === 0 ? "delete" : { leaveTo };
  }

  /**
   * Defers a job the outbound budget refused: nothing was sent, so its attempt is not
   * counted and nothing is said about its destination's health; it is due again when
   * the budget allows (at least a second on). Past its data's lifetime it fails.
   */
  async function defer(
    claimed: ClaimedJob,
    deferred: { until: number; reason: string },
  ): Promise<OutcomeFields> {
    const { job } = claimed;
    const at = now();
    if (at >= job.submittedAt + deps.envelopeTtlMs) {
      return await finish(claimed, "failed", {
        error: `Submission data expired while deferred: ${deferred.reason}`,
      });
    }
    const delay = Math.max(MIN_DEFER_MS, deferred.until - at);
    const next: JobRecord = {
      ...job,
      state: "pending",
      attempts: job.attempts - 1,
      dueAt: at + delay,
      lastError: `Deferred: ${deferred.reason}`,
      updatedAt: at,
    };
    return await putBack(claimed, next, delay, { result: "deferred", error: next.lastError });
  }

  /** Puts a claimed job back pending until `delay` from now, woken then. */
  async function putBack(
    claimed: ClaimedJob,
    next: JobRecord,
    delay: number,
    fields: OutcomeFields,
  ): Promise<OutcomeFields> {
    const { job } = claimed;
    const ref = {
      submittedAt: job.submittedAt,
      submissionId: job.submissionId,
      destinationId: job.destinationId,
      orgId: job.orgId,
    };
    const ok = await rescheduleJob(db, claimed, next, {
      wakeUp: deps.queues ? { message: wakeMessage([ref]), delayMs: delay } : null,
    });
    if (!ok) return await leaseLost(db, job);
    if (delay < config.sweepIntervalMs) deps.wakeLater(ref, delay);
    return { ...fields, retryInMs: delay };
  }

  async function fail(claimed: ClaimedJob, failure: DeliveryError): Promise<OutcomeFields> {
    const { job } = claimed;
    const limited = failure.pace?.limited === true && !failure.permanent;
    if (limited && now() >= job.submittedAt + deps.envelopeTtlMs) {
      return await finish(claimed, "failed", {
        statusCode: failure.statusCode,
        error: `Submission data expired while the destination limited its rate: ${failure.message}`,
      });
    }
    // A refusal for rate waits for the destination's hold, its attempt uncounted.
    const delay = limited
      ? Math.min(failure.pace?.retryAfterMs ?? RATE_LIMITED_DELAY_MS, MAX_RETRY_AFTER_MS)
      : failure.permanent
      ? null
      : nextRetryDelay(job.attempts, {
        scheduleMs: config.retryScheduleMs,
        retryAfterMs: failure.retryAfterMs,
      });
    if (delay === null) {
      const error = failure.permanent
        ? failure.message
        : `Retries exhausted after ${job.attempts} attempts: ${failure.message}`;
      return await finish(claimed, "failed", { statusCode: failure.statusCode, error });
    }
    const next: JobRecord = {
      ...job,
      state: "pending",
      attempts: limited ? job.attempts - 1 : job.attempts,
      dueAt: now() + delay,
      lastError: failure.message,
      lastStatusCode: failure.statusCode ?? null,
      updatedAt: now(),
    };
    return await putBack(claimed, next, delay, {
      result: limited ? "rate limited" : "retry",
      statusCode: next.lastStatusCode,
      error: next.lastError,
    });
  }

  async function record(claimed: ClaimedJob, result: SendResult): Promise<OutcomeFields> {
    const fields = result.delivered
      ? await finish(claimed, "delivered", {
        statusCode: result.receipt.statusCode,
        detail: result.receipt.detail,
      })
      : await fail(claimed, result.failure);
    if (fields.result !== "lease lost" && fields.result !== "rate limited") {
      await deps.onAttempt?.(claimed.job, result);
    }
    return fields;
  }

  return {
    record(claimed, result) {
      if ("held" in result) return hold(claimed, result.reason);
      if ("deferred" in result) return defer(claimed, result.deferred);
      return record(claimed, result);
    },
    async handBack(claimed) {
      const { job } = claimed;
      const back = { ...job, state: "pending" as const, dueAt: now(), attempts: job.attempts - 1 };
      await rescheduleJob(db, claimed, back, { wakeUp: null });
    },
    finishedHere: (ref) => recentlyDone.has(refKey(ref)),
  };
}
