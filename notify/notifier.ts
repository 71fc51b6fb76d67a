/**
 * The notifier of one process: hears what delivery and the admin routes report
 * (a destination failing, paused, recovered; submissions failed for good; a key
 * rotated), records each as an event in the organization's KV outbox, and in the
 * background (woken at once by a new event, and every sweep interval like the rest of
 * delivery) turns due outbox groups into notice jobs, one per channel, and hands them
 * to the delivery engine, which sends them as a job kind of its own
 * (delivery/notice.ts). Whether a destination is failing, and whether its owner was
 * told, is its health's failing record (store/destination_health.ts): the notifier
 * reads what each attempt changed there and keeps no copy.
 *
 * @module
 */
import type { Config } from "../config.ts";
import { describeError, type Logger } from "../log.ts";
import type { Db } from "../store/db.ts";
import { type HealthChange, markFailingTold } from "../store/destination_health.ts";
import { getOrg } from "../store/orgs.ts";
import { getDestination } from "../store/destinations.ts";
import type { JobRecord } from "../store/job_record.ts";
import { dispatchEvent, dropEvent, type NoticeRef } from "../store/notice_jobs.ts";
import {
  claimSummary,
  countDestinationJobs,
  dueEvents,
  getNotificationSettings,
  listNotificationSettings,
  type NewEvent,
  recordEvent,
} from "../store/notifications.ts";
import { channelsFor } from "./channels.ts";
import { lastPeriod, summaryFigures } from "./summary.ts";

/** What the notifier needs. */
export interface NotifierDeps {
  db: Db;
  config: Pick<Config, "notify" | "sweepIntervalMs">;
  logger: Logger;
  now?: () => number;
  /** Whether this process turns events into jobs (default true); else it only records them. */
  background?: boolean;
  /** Hands new notice jobs to the delivery engine (absent: the engine's sweep finds them). */
  wakeNotices?: (refs: NoticeRef[]) => void;
}

/** The notifier of one process. */
export interface Notifier {
  /** Records an event in the outbox and wakes the notifier. */
  record(event: NewEvent): Promise<void>;
  /** Wakes the notifier. */
  wake(): void;
  /** Hands notice jobs just queued (a test) to the delivery engine. */
  wakeNotices(refs: NoticeRef[]): void;
  /** Hears every recorded delivery attempt and what it changed in its destination's health. */
  afterAttempt(job: JobRecord, change: HealthChange): Promise<void>;
  /** Hears a job failed for good (never awaited by delivery). */
  onFailed(job: JobRecord): void;
  /** One pass now: summaries looked for, due groups to jobs. */
  runOnce(): Promise<void>;
  /** Stops the background passes and waits for the one under way. */
  close(): Promise<void>;
}

/** Most outbox groups handled per pass. */
const PER_PASS = 100;
/** How often summaries are looked for. */
const SUMMARY_CHECK_MS = 10 * 60_000;

/** Events of one group as one: counts added, ids in order, the latest detail. */
function merged(events: NewEvent[]): NewEvent {
  const last = events.at(-1)!;
  if (events.length === 1) return last;
  return {
    ...last,
    count: events.reduce((sum, event) => sum + (event.count ?? 1), 0),
    submissionIds: events.flatMap((event) => event.submissionIds ?? []),
  };
}

/** Starts the notifier's background passes. */
export function startNotifier(deps: NotifierDeps): Notifier {
  const { db, config, logger } = deps;
  const now = deps.now ?? Date.now;
  const wakeNotices = deps.wakeNotices ?? (() => {});
  let running: Promise<void> | null = null;
  let again = false;
  let closed = false;
  let lastSummaryCheck = -Infinity;

  const background = deps.background ?? true;
  function wake() {
    if (closed || !background) return;
    if (running !== null) {
      again = true;
      return;
    }
    running = pass().catch((error) =>
      logger.error("notifier pass failed", { error: describeError(error) })
    ).finally(() => {
      running = null;
      if (again && !closed) {
        again = false;
        wake();
      }
    });
  }
  const timer = background ? setInterval(wake, config.sweepIntervalMs) : undefined;
  queueMicrotask(wake);

  async function pass(options: { summaries?: boolean } = {}) {
    if (options.summaries || now() - lastSummaryCheck >= SUMMARY_CHECK_MS) {
      lastSummaryCheck = now();
      await queueSummaries();
    }
    for (const entry of await dueEvents(db, { now: now(), limit: PER_PASS })) {
      if (closed) return;
      const org = await getOrg(db, entry.value.orgId);
      if (org === null) {
        await dropEvent(db, entry);
        continue;
      }
      const settings = await getNotificationSettings(db, entry.value.orgId);
      // A disabled organization is told nothing: its events are dropped (docs/notifications.md).
      const channels = org.disabledAt ? [] : channelsFor(settings, entry.value);
      const refs = await dispatchEvent(db, entry, {
        channels,
        now: now(),
        groupMs: config.notify.groupMs,
      });
      if (refs !== null) wakeNotices(refs);
    }
  }

  /** Queues each organization's summary of the last complete day or week, once. */
  async function queueSummaries() {
    for (const { orgId, settings } of await listNotificationSettings(db)) {
      if (settings.summary === "off" || (await getOrg(db, orgId))?.disabledAt) continue;
      const period = lastPeriod(settings.summary, now());
      if (!await claimSummary(db, orgId, period.id)) continue;
      const figures = await summaryFigures(db, orgId, period);
      await recordEvent(db, { orgId, type: "summary", subject: period.id, figures }, {
        now: now(),
        groupMs: config.notify.groupMs,
      });
    }
  }

  /**
   * Events waiting for the write of their group under way in this process: many jobs
   * failing at once make one commit per group at a time, not one each racing the others
   * for the same key.
   */
  const queued = new Map<string, NewEvent[]>();

  async function record(event: NewEvent) {
    // A deleted organization's last deliveries tell no one (nor leave an outbox behind).
    if (await getOrg(db, event.orgId) === null) return;
    const key = JSON.stringify([event.orgId, event.type, event.subject]);
    const waiting = queued.get(key);
    if (waiting !== undefined) {
      waiting.push(event); // written by the write under way, right after its commit
      return;
    }
    queued.set(key, []);
    try {
      let batch = [event];
      while (batch.length > 0) {
        await recordEvent(db, merged(batch), { now: now(), groupMs: config.notify.groupMs });
        batch = queued.get(key)!.splice(0);
      }
    } finally {
      queued.delete(key);
    }
    wake();
  }

  /** Records an event without failing the caller: a lost notice is logged, not thrown. */
  function recordQuietly(event: NewEvent): Promise<void> {
    return record(event).catch((error) =>
      logger.error("notification event not recorded", {
        orgId: event.orgId,
        type: event.type,
        error: describeError(error),
      })
    );
  }

  return {
    record,
    wake,
    wakeNotices,
    async afterAttempt(job, change) {
      const about = { orgId: job.orgId, formId: job.formId, destinationId: job.destinationId };
      const subject = job.destinationId;
      if ((change.cleared?.toldAt ?? null) !== null) {
        await recordQuietly({ ...about, type: "message.attempt.recovered", subject });
        return;
      }
      const failing = change.failing;
      if (failing === null) return;
      if (change.paused) {
        // Told as paused: no "failing" after it, and "recovered" once it delivers again.
        await markFailingTold(db, subject, now());
        const destination = await getDestination(db, job.formId, job.destinationId);
        const held = await countDestinationJobs(db, job.destinationId);
        const detail = destination?.health.reason ?? failing.lastError;
        await recordQuietly({
          ...about,
          type: "endpoint.disabled",
          subject,
          detail,
          statusCode: failing.lastStatusCode ?? null,
          held,
          firstAt: failing.since,
        });
        return;
      }
      if (failing.failures < config.notify.failingAfterAttempts) return;
      if ((failing.toldAt ?? null) !== null) return;
      // Another process may have told it first: the mark is the record's, checked in KV.
      const told = await markFailingTold(db, subject, now());
      if (told === null) return;
      await recordQuietly({
        ...about,
        type: "message.attempt.failing",
        subject,
        detail: failing.lastError,
        statusCode: failing.lastStatusCode ?? null,
        count: failing.failures,
        firstAt: failing.since,
      });
    },
    onFailed(job) {
      void recordQuietly({
        orgId: job.orgId,
        formId: job.formId,
        destinationId: job.destinationId,
        type: "message.attempt.exhausted",
        subject: job.destinationId,
        submissionIds: [job.submissionId],
        detail: job.lastError,
        statusCode: job.lastStatusCode,
      });
    },
    runOnce: async () => {
      while (running !== null) await running;
      running = pass({ summaries: true }).finally(() => running = null);
      await running;
    },
    async close() {
      closed = true;
      clearInterval(timer);
      while (running !== null) await running;
    },
  };
}
