import type { Config } from "../config.ts";
import { type Connector, DeliveryError, type DeliveryReceipt } from "../connectors/types.ts";
import { describeError, type Logger } from "../log.ts";
import type { Db } from "../store/db.ts";
import type { StoredSubmission } from "../store/submissions.ts";
import type { DestinationType } from "../connectors/registry.ts";
import { type DestinationRecord, openDestinationConfig } from "../store/destinations.ts";
import { listDueJobs, listenForWakes } from "../store/due_jobs.ts";
import { readSealedEnvelope } from "../store/envelope_chunks.ts";
import {
  deleteEnvelopeIfLast,
  type EnvelopeCleanup,
  sweepEnvelopeMarkers,
} from "../store/envelope_cleanup.ts";
import { createDestinationCache } from "../store/form_cache.ts";
import type { ClaimedJob, JobRecord, JobRef, KnownJob } from "../store/job_record.ts";
import { claimJob, claimKnownJob, finishJob, rescheduleJob } from "../store/jobs.ts";
import { outcomeOf } from "../store/outcomes.ts";
import { wakeMessage } from "../store/wake.ts";
import { openEnvelope } from "./envelope.ts";
import { nextRetryDelay } from "./retry.ts";

/** What the engine needs. */
export interface EngineDeps {
  db: Db;
  connectors: Record<DestinationType, Connector>;
  config: Pick<
    Config,
    "deliveryConcurrency" | "leaseMs" | "retryScheduleMs" | "sweepIntervalMs"
  >;
  logger: Logger;
  /** Whether the KV offers queues (local KV does; KV Connect and Deno Deploy do not). */
  queues: boolean;
  now?: () => number;
  /**
   * How long this process has been saturated with accepting submissions (ms), null
   * when it is not. Acceptance comes first: for the first BURST_PAUSE_MS of such a
   * burst no new delivery starts, after that at most MIN_CONCURRENCY, so the burst is
   * answered fast and its deliveries follow as soon as it eases.
   */
  ingestBurstMs?: () => number | null;
  /** Jobs waiting for a slot in memory at most (default MAX_WAITING); the rest wait in KV. */
  maxWaiting?: number;
  /** Called after every final outcome (auto-disable and tests hook in here). */
  onFinal?: (job: JobRecord, status: "delivered" | "failed") => void | Promise<void>;
}

/** The delivery engine of one process. */
export interface DeliveryEngine {
  /** Wakes jobs in this process (from the queue, from the sweep). */
  wake(refs: JobRef[]): void;
  /** Wakes the jobs of a submission this process just stored, claimable without a read. */
  wakeStored(stored: StoredSubmission): void;
  /** Dispatches every due job and expired lease; returns how many were found. */
  sweep(): Promise<number>;
  /**
   * Stops sweeping and waits for deliveries under way, which are aborted and put back
   * as due. The queue listener ends when the KV is closed: await `listening` after that.
   */
  close(): Promise<void>;
  /** Deliveries running and jobs waiting for a slot in this process. */
  stats(): { active: number; waiting: number };
  /** Settles once the queue listener has stopped (after kv.close()). */
  listening: Promise<void>;
}

const SWEEP_BATCH = 10_000;
/** How long a destination record may be cached; changes in this process apply at once. */
const DESTINATION_CACHE_MS = 1000;

const RECENTLY_DONE_MAX = 50_000;
/** Opened destination configs cached at most. */
const CONFIG_CACHE_MAX = 50_000;
/** Jobs woken and waiting for a slot in memory at most; the rest wait in KV. */
const MAX_WAITING = 20_000;
/** Freshly stored jobs remembered for claiming without a read (they hold their envelopes). */
const MAX_STORED_HINTS = 4_000;
/** Jobs recording their result, per delivery slot, before new ones wait. */
const MAX_RECORDING_PER_SLOT = 2;
/** Deliveries that keep going during a burst of acceptance once it outlasts BURST_PAUSE_MS. */
const MIN_CONCURRENCY = 2;
/**
 * How long a burst of acceptance holds new deliveries back entirely: the burst's
 * visitors wait for their answers, its deliveries can follow it. A longer flood gets
 * MIN_CONCURRENCY deliveries anyway, so it never stops delivery for longer than this.
 */
export const BURST_PAUSE_MS = 30_000;
/** How often held-back deliveries look again whether the burst is over. */
const BURST_RECHECK_MS = 100;

const refKey = (ref: JobRef) => `${ref.submissionId}/${ref.destinationId}`;

/**
 * Runs delivery jobs: claims each with a versionstamp check, delivers through the
 * destination type's connector under a bounded concurrency, then records the outcome
 * (delivered, failed, or retry at a time) in one commit. Queue messages and the sweep
 * only wake jobs; the job in KV is the truth, so a lost or duplicate wake-up does no harm.
 */
export function startDeliveryEngine(deps: EngineDeps): DeliveryEngine {
  const { db, connectors, config, logger } = deps;
  const now = deps.now ?? Date.now;
  const maxWaiting = deps.maxWaiting ?? MAX_WAITING;
  // Waiting jobs per destination, served round-robin; a destination may hold at most
  // half the slots, so a slow or hanging one never starves the others.
  const waiting = new Map<string, JobRef[]>();
  const running = new Map<string, number>();
  const known = new Set<string>();
  // Jobs this process just wrote (see wakeStored), bounded: past it, claims read the job.
  const stored = new Map<string, { known: KnownJob; firstChunk: Uint8Array<ArrayBuffer> }>();
  // Jobs finished here lately, so that their queue wake-ups cost no KV read.
  const recentlyDone = new Set<string>();
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let recheck: ReturnType<typeof setTimeout> | null = null;
  const closing = new AbortController();
  const destinations = createDestinationCache(db, { ttlMs: DESTINATION_CACHE_MS });
  // Slots held by jobs being claimed and delivered. Recording the result happens after
  // the slot is given back, so the KV's commit cycle does not hold it; `recording`
  // counts every job in progress, slot or not, and is bounded too.
  let active = 0;
  let recording = 0;
  let waitingCount = 0;
  let closed = false;
  let overflowed = false;
  let idle: PromiseWithResolvers<void> | null = null;

  function wake(refs: JobRef[]) {
    if (closed) return;
    for (const ref of refs) {
      // A backlog beyond this stays in KV only; the sweep brings it in as room frees up.
      if (waitingCount >= maxWaiting) {
        overflowed = true;
        break;
      }
      const key = refKey(ref);
      if (known.has(key)) continue;
      known.add(key);
      const queue = waiting.get(ref.destinationId);
      if (queue) queue.push(ref);
      else waiting.set(ref.destinationId, [ref]);
      waitingCount++;
    }
    pump();
  }

  function pump() {
    if (overflowed && waitingCount < maxWaiting / 2) {
      overflowed = false;
      sweepInBackground();
    }
    let started = true;
    const limit = deliveryLimit();
    if (limit === 0 && waitingCount > 0 && recheck === null && !closed) {
      recheck = setTimeout(() => {
        recheck = null;
        pump();
      }, BURST_RECHECK_MS);
    }
    // A destination holds at most half the slots, so a hanging one never starves others.
    const perDestination = Math.max(1, Math.floor(limit / 2));
    const maxInProgress = MAX_RECORDING_PER_SLOT * config.deliveryConcurrency;
    while (
      !closed && started && active < limit && recording < maxInProgress && waitingCount > 0
    ) {
      started = false;
      for (const [destinationId, queue] of waiting) {
        if (active >= limit || recording >= maxInProgress) break;
        if ((running.get(destinationId) ?? 0) >= perDestination) continue;
        const ref = queue.shift()!;
        if (queue.length === 0) waiting.delete(destinationId);
        waitingCount--;
        start(ref);
        started = true;
      }
    }
  }

  /** Deliveries that may run now: all slots, unless acceptance is in a burst. */
  function deliveryLimit(): number {
    const burstMs = deps.ingestBurstMs?.() ?? null;
    if (burstMs === null) return config.deliveryConcurrency;
    return burstMs < BURST_PAUSE_MS ? 0 : Math.min(MIN_CONCURRENCY, config.deliveryConcurrency);
  }

  function start(ref: JobRef) {
    active++;
    recording++;
    running.set(ref.destinationId, (running.get(ref.destinationId) ?? 0) + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      active--;
      const count = running.get(ref.destinationId)! - 1;
      if (count === 0) running.delete(ref.destinationId);
      else running.set(ref.destinationId, count);
      pump();
    };
    run(ref, release)
      .catch((error) =>
        logger.error("delivery run failed", { ...ref, error: describeError(error) })
      )
      .finally(() => {
        release();
        recording--;
        known.delete(refKey(ref));
        if (active === 0 && recording === 0 && idle) idle.resolve();
        pump();
      });
  }

  /** One log line per attempt: ids, result, status and timing; never payload. */
  type AttemptResult = Record<string, unknown> & { result: string };

  async function run(ref: JobRef, release: () => void) {
    const key = refKey(ref);
    const hint = stored.get(key);
    stored.delete(key);
    const options = { now: now(), leaseMs: config.leaseMs };
    const claimed =
      (hint
        ? await claimKnownJob(db, hint.known, { ...options, firstChunk: hint.firstChunk })
        : null) ??
        await claimJob(db, ref, options);
    if (claimed === null) return;
    const { job } = claimed;
    const started = performance.now();
    let receipt: DeliveryReceipt | null = null;
    let failure: DeliveryError | null = null;
    try {
      receipt = await attempt(claimed);
    } catch (error) {
      failure = error instanceof DeliveryError ? error : new DeliveryError(
        `Delivery failed: ${describeError(error)}`,
        { permanent: false, cause: error },
      );
    } finally {
      release();
    }
    let outcome: AttemptResult;
    if (receipt !== null) {
      outcome = await finish(claimed, "delivered", {
        statusCode: receipt.statusCode,
        detail: receipt.detail,
      });
    } else if (closed) {
      // Shutting down is not the destination's fault: hand the job back at once.
      const back = { ...job, state: "pending" as const, dueAt: now(), attempts: job.attempts - 1 };
      await rescheduleJob(db, claimed, back, { wakeUp: null });
      return;
    } else {
      outcome = await fail(claimed, failure!);
    }
    logger.info("delivery attempt", {
      submissionId: job.submissionId,
      destinationId: job.destinationId,
      type: job.type,
      attempt: job.attempts,
      ms: Math.round(performance.now() - started),
      ...outcome,
    });
  }

  // Opened and validated configs, by destination; a changed config has a new sealed text.
  const configs = new Map<string, { sealed: string; config: unknown }>();

  async function openConfig(destination: DestinationRecord, connector: Connector) {
    const cached = configs.get(destination.id);
    if (cached?.sealed === destination.sealedConfig) return cached.config;
    const stored = await openDestinationConfig(db, destination);
    const parsed = connector.configSchema.safeParse(stored);
    if (!parsed.success) {
      throw new DeliveryError("Destination config is no longer valid", { permanent: true });
    }
    if (configs.size >= CONFIG_CACHE_MAX) configs.clear();
    configs.set(destination.id, { sealed: destination.sealedConfig, config: parsed.data });
    return parsed.data;
  }

  async function attempt(claimed: ClaimedJob) {
    const { job } = claimed;
    const destination = await destinations.get(job.formId, job.destinationId);
    if (destination === null) {
      throw new DeliveryError("Destination was deleted before delivery", { permanent: true });
    }
    if (!destination.isEnabled) {
      throw new DeliveryError("Destination was disabled before delivery", { permanent: true });
    }
    const sealed = await readSealedEnvelope(db, claimed);
    if (sealed === null) {
      throw new DeliveryError("Submission data expired before delivery", { permanent: true });
    }
    const envelope = await openEnvelope(db.sealer, job.submissionId, sealed);
    const connector = connectors[destination.type];
    return await connector.deliver({
      envelope,
      config: await openConfig(destination, connector),
      deliveryId: `${job.submissionId}.${job.destinationId}`,
      destinationId: job.destinationId,
      signal: closing.signal,
    });
  }

  async function finish(
    claimed: ClaimedJob,
    status: "delivered" | "failed",
    result: { statusCode?: number; detail?: string; error?: string },
  ): Promise<AttemptResult> {
    const job: JobRecord = {
      ...claimed.job,
      lastError: result.error ?? null,
      lastStatusCode: result.statusCode ?? null,
      updatedAt: now(),
    };
    const cleanup = envelopeCleanup(job);
    if (!await finishJob(db, claimed, outcomeOf(job, status, result.detail ?? null), cleanup)) {
      return { result: "lease lost" };
    }
    if (recentlyDone.size >= RECENTLY_DONE_MAX) recentlyDone.clear();
    recentlyDone.add(refKey(job));
    if (cleanup === "check") await deleteEnvelopeIfLast(db, job);
    await deps.onFinal?.(job, status);
    return { result: status, statusCode: job.lastStatusCode, error: job.lastError };
  }

  /**
   * How the envelope is cleaned up when a job ends: deleted in its finishing commit
   * when every sibling job already finished in this process, else checked right after
   * the commit (the last sibling to commit deletes it).
   */
  function envelopeCleanup(job: JobRecord): EnvelopeCleanup {
    if (job.family === undefined) return "check";
    const siblingsDone = job.family.every((destinationId) =>
      destinationId === job.destinationId || recentlyDone.has(refKey({ ...job, destinationId }))
    );
    return siblingsDone ? "delete" : "check";
  }

  async function fail(claimed: ClaimedJob, failure: DeliveryError): Promise<AttemptResult> {
    const { job } = claimed;
    const delay = failure.permanent ? null : nextRetryDelay(job.attempts, {
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
      dueAt: now() + delay,
      lastError: failure.message,
      lastStatusCode: failure.statusCode ?? null,
      updatedAt: now(),
    };
    const ref = {
      submittedAt: job.submittedAt,
      submissionId: job.submissionId,
      destinationId: job.destinationId,
    };
    const ok = await rescheduleJob(db, claimed, next, {
      wakeUp: deps.queues ? { message: wakeMessage([ref]), delayMs: delay } : null,
    });
    if (!ok) return { result: "lease lost" };
    if (delay < config.sweepIntervalMs) {
      const timer = setTimeout(() => {
        timers.delete(timer);
        wake([ref]);
      }, delay);
      timers.add(timer);
    }
    return {
      result: "retry",
      retryInMs: delay,
      statusCode: next.lastStatusCode,
      error: next.lastError,
    };
  }

  function sweepInBackground() {
    sweep().catch((error) => logger.error("sweep failed", { error: describeError(error) }));
  }

  async function sweep(): Promise<number> {
    if (closed) return 0;
    const batch = Math.min(SWEEP_BATCH, maxWaiting);
    const due = await listDueJobs(db, {
      now: now(),
      limit: batch,
      skip: (ref) => known.has(refKey(ref)),
    });
    wake(due);
    // A full batch means more may be due: take them in as soon as there is room.
    if (due.length >= batch) overflowed = true;
    // Envelope checks a crash cut short; a live check takes well under the lease.
    await sweepEnvelopeMarkers(db, { now: now(), olderThanMs: config.leaseMs, limit: SWEEP_BATCH });
    return due.length;
  }

  const listener = deps.queues
    ? listenForWakes(db, (refs) => {
      // A full waiting list would turn every ref away (the sweep brings them in later):
      // during a burst that is every message, so do not read them.
      if (waitingCount >= maxWaiting) {
        overflowed = true;
        return;
      }
      // Jobs this process accepted were woken directly and are mostly done by now.
      wake(refs().filter((ref) => !recentlyDone.has(refKey(ref))));
    })
    : null;
  const sweeper = setInterval(sweepInBackground, config.sweepIntervalMs);
  sweepInBackground();

  return {
    wake,
    wakeStored({ jobs, firstChunk }) {
      if (closed) return;
      for (const known of jobs) {
        // Behind a long backlog a hint would be dropped before its job's turn comes.
        if (waitingCount >= MAX_STORED_HINTS) break;
        // Hints of jobs claimed elsewhere are never taken: start afresh when full.
        if (stored.size >= MAX_STORED_HINTS) stored.clear();
        stored.set(refKey(known.job), { known, firstChunk });
      }
      wake(jobs.map((known) => known.job));
    },
    sweep,
    stats: () => ({ active, waiting: waitingCount }),
    listening: listener ?? Promise.resolve(),
    async close() {
      closed = true;
      clearInterval(sweeper);
      for (const timer of timers) clearTimeout(timer);
      if (recheck !== null) clearTimeout(recheck);
      closing.abort(new Error("Delivery engine closed"));
      if (active > 0 || recording > 0) {
        idle = Promise.withResolvers();
        await idle.promise;
      }
    },
  };
}
