/**
 * The delivery engine of one process: the wiring of the queue, the sweep and the
 * timers to the dispatcher (which job runs next), the claim (a versionstamp check, with
 * or without a read), the attempt (attempt.ts) and the outcome step (apply_result.ts).
 * Owner notices are a job kind of the same engine (notice.ts): swept, woken, dispatched
 * and leased beside deliveries, each organization's channel a lane of its own.
 * Queue messages and the sweep only wake jobs; the job in KV is the truth, so a lost
 * or duplicate wake-up does no harm.
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { DestinationType } from "../connectors/registry.ts";
import type { Connector } from "../connectors/types.ts";
import { describeError, type Logger } from "../log.ts";
import { countAttempt } from "../metrics.ts";
import type { Db } from "../store/db.ts";
import { listDueJobs, listenForWakes } from "../store/due_jobs.ts";
import { sweepEnvelopeMarkers } from "../store/envelope_cleanup.ts";
import { type ClaimedJob, type JobRecord, type JobRef, refKey } from "../store/job_record.ts";
import type { UnknownKeyFound } from "./unknown_key.ts";
import { claimJob, claimKnownJob } from "../store/jobs.ts";
import { type Admission, createAdmission, orgBacklogShare } from "./admission.ts";
import { createClaimHints, type FreshSubmission } from "./claim_hints.ts";
import { type AttemptResult, createJobAttempts, type SendResult } from "./attempt.ts";
import { createDispatcher } from "./dispatcher.ts";
import type { OutboundBudget } from "./outbound_budget.ts";
import { createOutcomeStep } from "./apply_result.ts";
import { createPace, type PaceSignal, type PaceView, signalOf } from "./pace.ts";
import { createNoticeJobs, isNoticeLane, NOTICE_IN_FLIGHT, noticeJobRef } from "./notice.ts";
import { listDueNotices, type NoticeRef } from "../store/notice_jobs.ts";
import { envelopeTtlMs } from "../store/envelope.ts";
import { createShareExchange } from "../store/process_shares.ts";
import { createSweepSchedule } from "./sweep_schedule.ts";

/** What the engine needs. */
export interface EngineDeps {
  db: Db;
  connectors: Record<DestinationType, Connector>;
  config: Pick<
    Config,
    | "deliveryConcurrency"
    | "deliveryOrgShare"
    | "pace"
    | "backlog"
    | "leaseMs"
    | "retryScheduleMs"
    | "sweepIntervalMs"
    | "failedRetentionMs"
    | "publicUrl"
  >;
  logger: Logger;
  /** Whether the KV offers queues (local KV does; KV Connect and Deno Deploy do not). */
  queues: boolean;
  now?: () => number;
  /** How long acceptance for an organization has been saturated, null when it is not (see DispatcherOptions.burstMs). */
  ingestBurstMs?: (orgId: string) => number | null;
  /** Organizations' outbound budgets; past them a delivery is deferred. None: no limit. */
  outbound?: OutboundBudget;
  /** Called after every recorded delivery or failure (destination health hooks in here). */
  onAttempt?: (job: JobRecord, result: SendResult) => void | Promise<void>;
  /** Called once a job has failed for good (owner notifications). */
  onFailed?: (job: JobRecord) => void;
  /** Hears a job held because its sealed data needs a key this process lacks. */
  onUnknownKey?: (job: JobRecord, found: UnknownKeyFound) => void;
}

/** The delivery engine of one process. */
export interface DeliveryEngine {
  /** Wakes jobs in this process (from the queue, from the sweep). */
  wake(refs: JobRef[]): void;
  /** Wakes notice jobs (owner notifications) just queued. */
  wakeNotices(refs: NoticeRef[]): void;
  /** Wakes the jobs of a submission this process just stored, claimable without a read. */
  wakeStored(stored: FreshSubmission): void;
  /** Admits submissions while this process's backlog is under its bound (config.backlog). */
  admission: Admission;
  /**
   * Dispatches every due job and expired lease, once the background sweep under way (if
   * any) has ended; returns how many were found.
   */
  sweep(): Promise<number>;
  /**
   * Stops sweeping and waits for deliveries under way, which are aborted and put back
   * as due. The queue listener ends when the KV is closed: await `listening` after that.
   */
  close(): Promise<void>;
  /** Deliveries running and jobs waiting for a slot in this process. */
  stats(): { active: number; waiting: number };
  /** A destination's pace in this process, and its deliveries in flight here. */
  pace(destinationId: string): DestinationPace;
  /** The destinations this process paces (has delivered to lately); notice lanes left out. */
  paces(): IterableIterator<[string, DestinationPace]>;
  /** Settles once the queue listener has stopped (after kv.close()). */
  listening: Promise<void>;
  /**
   * Settles once this process's record is in KV for the others to count (its first share
   * exchange; a failure is logged and settles it too): the service admits nothing before.
   */
  registered: Promise<void>;
  /** This process's id in its process record (the rate limit marks under it too). */
  processId: string;
}

/** A destination's pace in one process (pace.ts), with its deliveries in flight there. */
export type DestinationPace = PaceView & { inFlight: number };

const SWEEP_BATCH = 10_000;
/**
 * How often a process shares its paces and budget usage with the other processes on its
 * KV and takes up theirs (pace.ts merge, outbound_budget.ts charge): one commit and one
 * listing a second while it delivers.
 */
export const PACE_SYNC_MS = 1000;
/** The first follow-up exchange after a destination is first used here (then 4× that). */
const QUICK_SYNC_MS = 50;
/**
 * Claim hints kept at most: the jobs of a full default backlog. A bound raised past it
 * (to hold a 10 s burst's 200 000 jobs, say) does not take the hints' memory with it.
 */
const MAX_HINTS = 20_000;
/**
 * Envelope bytes the claim hints may keep: the small submissions of a full default
 * backlog (about 1 KB a submission as counted) fit many times over.
 */
const MAX_HINT_BYTES = 32 * 1024 * 1024;

/**
 * Runs delivery jobs: claims each with a versionstamp check, delivers through the
 * destination type's connector under a bounded concurrency, then records the outcome
 * (delivered, failed, or retry at a time) in one commit.
 */
export function startDeliveryEngine(deps: EngineDeps): DeliveryEngine {
  const { db, config, logger } = deps;
  const now = deps.now ?? Date.now;
  // The whole bounded backlog waits in memory (a few hundred bytes a job); what comes
  // in beyond it from the sweep or the queue (a restart, other processes) waits in KV.
  const maxWaiting = config.backlog.maxJobs;
  // Jobs this process just wrote (see wakeStored), as many as may wait up to MAX_HINTS: a
  // claim without a hint reads the job first (docs/design.md, "Claim hints for every
  // waiting job").
  const hints = createClaimHints({
    maxHints: Math.min(maxWaiting, MAX_HINTS),
    maxBytes: MAX_HINT_BYTES,
  });
  // Jobs claimed here whose result is not being recorded yet, with their leases'
  // versionstamps (a finishing sibling may leave the envelope's cleanup to them, as
  // to the jobs with hints).
  const claims = new Map<string, string>();
  // Jobs whose claim or result is being committed here. A finishing sibling waits for
  // them before it decides the envelope's cleanup: until then it cannot tell whether they
  // still have to end, and would check in KV after its commit (a read and a second commit).
  const committing = new Map<string, Promise<unknown>>();
  /** Keeps `promise` as the job's commit under way until it settles. */
  function whileCommitting<T>(key: string, promise: Promise<T>): Promise<T> {
    committing.set(key, promise);
    const done = () => {
      if (committing.get(key) === promise) committing.delete(key);
    };
    promise.then(done, done);
    return promise;
  }
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const closing = new AbortController();
  const attempts = createJobAttempts({ ...deps, sendersOf: (id) => pace.senders(id) });
  const outcomes = createOutcomeStep({
    db,
    config,
    queues: deps.queues,
    now,
    envelopeTtlMs: envelopeTtlMs(config.retryScheduleMs, config.leaseMs),
    retainMs: config.failedRetentionMs,
    onAttempt: deps.onAttempt,
    onFailed: deps.onFailed,
    heldHere: (ref) => claims.get(refKey(ref)) ?? hints.versionstampOf(ref),
    committing: (ref) => committing.get(refKey(ref)),
    wakeLater(ref, delayMs) {
      const timer = setTimeout(() => {
        timers.delete(timer);
        dispatcher.wake([ref]);
      }, delayMs);
      timers.add(timer);
    },
  });
  const pace = createPace({ ...config.pace, now, onFirstUse: () => syncSoon() });
  const processId = crypto.randomUUID();
  const shares = createShareExchange(db, {
    processId,
    freshMs: 3 * PACE_SYNC_MS,
    now,
    freshLimit: Math.min(config.pace.initial, config.pace.max),
  });
  let syncingPace: Promise<void> | null = null;
  /** Until close(): after it, nothing more is shared. */
  let sharing = true;
  /**
   * Shares this process's paces and budget usage and takes up the others' (one exchange
   * at a time).
   */
  function syncPace() {
    if (!sharing) return;
    const { outbound } = deps;
    syncingPace ??= shares.exchange({
      paces: pace.shares(),
      usage: outbound?.usage() ?? [],
      debts: outbound?.debts(now()) ?? [],
    })
      .then((others) => {
        pace.merge(others.paces);
        outbound?.charge(others.usage, now());
        outbound?.join(others, now());
        if (others.writeError !== undefined) {
          logger.warn("share exchange: own record not written", {
            error: describeError(others.writeError),
          });
        }
      })
      .catch((error) => logger.warn("share exchange failed", { error: describeError(error) }))
      .finally(() => syncingPace = null);
  }
  // The first exchange at once: it writes the record that counts this process as live.
  syncPace();
  const registered = syncingPace ?? Promise.resolve();
  // The budgets spend nothing before this process has joined the others' (outbound_budget.ts).
  deps.outbound?.holdUntil(registered);
  const paceSync = setInterval(syncPace, PACE_SYNC_MS);
  let quickSyncs: ReturnType<typeof setTimeout> | null = null;
  /**
   * A destination new here: share at once, and again soon, so that processes that took
   * it up together learn of each other before their slow starts add up.
   */
  function syncSoon() {
    syncPace();
    if (quickSyncs !== null) return;
    quickSyncs = setTimeout(() => {
      syncPace();
      quickSyncs = setTimeout(() => {
        syncPace();
        quickSyncs = null;
      }, 4 * QUICK_SYNC_MS);
    }, QUICK_SYNC_MS);
  }
  const dispatcher = createDispatcher({
    concurrency: config.deliveryConcurrency,
    orgShare: config.deliveryOrgShare,
    maxWaiting,
    burstMs: deps.ingestBurstMs,
    // Half an organization's share of the backlog: a burst still has its first answers
    // fast, and its deliveries make room before admission would have to refuse.
    pauseBelow: Math.floor(orgBacklogShare(config.backlog) / 2),
    onLeft: () => admission.freed(),
    pace,
    // A notice lane (an organization's channel) takes a few at a time, whatever its pace.
    laneCap: (lane) => isNoticeLane(lane) ? NOTICE_IN_FLIGHT : Infinity,
    run: (ref, release) =>
      isNoticeLane(ref.destinationId) ? runNotice(ref, release) : run(ref, release),
    onError: (ref, error) =>
      logger.error("delivery run failed", { ...ref, error: describeError(error) }),
    onRoom: sweepInBackground,
  });

  const admission = createAdmission(dispatcher.backlog, config.backlog);

  /** Claims a woken job: without a read when it has a hint; null when it is not there to claim. */
  async function claim(ref: JobRef): Promise<ClaimedJob | null> {
    const hint = hints.take(ref);
    const options = { now: now(), leaseMs: config.leaseMs };
    return (hint
      ? await claimKnownJob(db, hint.known, {
        ...options,
        envelope: hint.envelopeJson,
        // A hint is the job as stored, pending (held ones get none): it has no index entry.
        unindexed: true,
      })
      : null) ??
      await claimJob(db, ref, options);
  }

  /**
   * Runs an attempt of any job kind, gives its slot back with what it told of the lane's
   * pace (nothing when shutting down: that says nothing of the receiver), then hands the
   * result to `record` in the same turn (a delivery marks its commit under way before a
   * sibling can look: `finished` and the start of `record` run with no await between).
   * Shutting down is not the receiver's fault: a failure then is handed back at once.
   */
  async function attemptThenRecord<C>(
    claimed: C,
    kind: {
      attempt(claimed: C, signal: AbortSignal): Promise<AttemptResult>;
      handBack(claimed: C): Promise<unknown>;
    },
    release: (signal?: PaceSignal) => void,
    record: (result: AttemptResult, started: number) => Promise<unknown>,
    finished?: () => void,
  ): Promise<void> {
    const started = performance.now();
    let result;
    try {
      result = await kind.attempt(claimed, closing.signal);
    } finally {
      finished?.();
      const aborted = result === undefined || closing.signal.aborted;
      release(aborted ? undefined : signalOf(result!, performance.now() - started));
    }
    if (!result.delivered && closing.signal.aborted) await kind.handBack(claimed);
    else await record(result, started);
  }

  const notices = createNoticeJobs({ ...deps, now });

  /** Claims a woken notice job, sends it, gives its slot back and records the result. */
  async function runNotice(ref: JobRef, release: (signal?: PaceSignal) => void) {
    const claimed = await notices.claim(ref);
    if (claimed === null) return;
    await attemptThenRecord(claimed, notices, release, (result) => notices.record(claimed, result));
  }

  /** Claims a woken job, attempts it, gives its slot back and records the result. */
  async function run(ref: JobRef, release: (signal?: PaceSignal) => void) {
    const key = refKey(ref);
    // Held from the moment the claim is known, before a waiting sibling resumes.
    const claimed = await whileCommitting(
      key,
      claim(ref).then((claimed) => {
        if (claimed !== null) claims.set(key, claimed.versionstamp);
        return claimed;
      }),
    );
    if (claimed === null) return;
    await attemptThenRecord(
      claimed,
      { ...attempts, handBack: outcomes.handBack },
      release,
      async (result, started) => {
        const fields = await whileCommitting(key, outcomes.record(claimed, result));
        const { job } = claimed;
        // Whose delivery, where and why, in every line: never a secret or a payload field.
        const { error, ...outcome } = fields;
        // A failed attempt is a host's business (warn); a delivery or a held job is the story.
        const failed = fields.result === "failed" || fields.result === "retry";
        logger[failed ? "warn" : "info"]("delivery attempt", {
          orgId: job.orgId,
          formId: job.formId,
          destinationId: job.destinationId,
          submissionId: job.submissionId,
          type: job.type,
          attempt: job.attempts,
          ms: Math.round(performance.now() - started),
          ...outcome,
          reason: error ?? null,
        });
        countAttempt(job, fields, started);
      },
      () => claims.delete(key),
    );
  }

  // Sweeps one at a time, the background ones within a tenth of the time (sweep_schedule.ts).
  const sweeps = createSweepSchedule(() =>
    sweep().catch((error) => logger.error("sweep failed", { error: describeError(error) }))
  );
  function sweepInBackground() {
    sweeps.request();
  }

  async function sweep(): Promise<number> {
    if (closing.signal.aborted) return 0;
    const batch = Math.min(SWEEP_BATCH, maxWaiting);
    const due = await listDueJobs(db, { now: now(), limit: batch, skip: dispatcher.has });
    dispatcher.wake(due);
    const dueNotices = (await listDueNotices(db, { now: now(), limit: batch })).map(noticeJobRef);
    dispatcher.wake(dueNotices.filter((ref) => !dispatcher.has(ref)));
    // A full batch means more may be due: take them in as soon as there is room.
    if (due.length >= batch) dispatcher.noteBacklog();
    // Envelope checks a crash cut short; a live check takes well under the lease.
    await sweepEnvelopeMarkers(db, { now: now(), olderThanMs: config.leaseMs, limit: SWEEP_BATCH });
    return due.length;
  }

  const listener = deps.queues
    ? listenForWakes(db, (refs) => {
      // A full waiting list would turn every ref away (the sweep brings them in later):
      // during a burst that is every message, so do not read them.
      if (dispatcher.full()) return;
      // Jobs this process accepted were woken directly and are mostly done by now.
      dispatcher.wake(refs().filter((ref) => !outcomes.finishedHere(ref)));
    })
    : null;
  const sweeper = setInterval(sweepInBackground, config.sweepIntervalMs);
  sweepInBackground();

  return {
    wake: dispatcher.wake,
    wakeNotices: (refs) => dispatcher.wake(refs.map(noticeJobRef)),
    wakeStored(submission) {
      if (closing.signal.aborted) return;
      // Held jobs wait for their destination to be resumed.
      const jobs = submission.jobs.filter((known) => known.job.state !== "held");
      hints.remember(jobs, submission, dispatcher.stats().waiting);
      dispatcher.wake(jobs.map((known) => known.job));
    },
    // Deploy's cron and the tests: never beside a background sweep.
    sweep: () => sweeps.explicit(sweep),
    admission,
    stats: dispatcher.stats,
    pace: (destinationId) => ({
      ...pace.view(destinationId),
      inFlight: dispatcher.running(destinationId),
    }),
    *paces() {
      for (const [id, view] of pace.views()) {
        // Notice lanes are an organization's channels, not destinations (metrics list these).
        if (isNoticeLane(id)) continue;
        yield [id, { ...view, inFlight: dispatcher.running(id) }];
      }
    },
    listening: listener ?? Promise.resolve(),
    registered,
    processId,
    async close() {
      const idle = dispatcher.close();
      clearInterval(sweeper);
      sweeps.close();
      sharing = false;
      clearInterval(paceSync);
      if (quickSyncs !== null) clearTimeout(quickSyncs);
      await syncingPace;
      await shares.withdraw().catch(() => {/* its records expire within seconds */});
      for (const timer of timers) clearTimeout(timer);
      closing.abort(new Error("Delivery engine closed"));
      await idle;
    },
  };
}
