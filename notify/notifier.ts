/**
 * The notifier of one process: hears what delivery and the admin routes report
 * (a destination failing, paused, recovered; submissions failed for good; a key
 * rotated), records each as an event in the organization's KV outbox, and in the
 * background (woken at once by a new event, and every sweep interval like the rest of
 * delivery) turns due outbox groups into one job per channel and sends those jobs with
 * the existing connectors, within the organization's outbound budget (and so the
 * platform relay's caps), retrying on the delivery retry schedule. A job lives in KV
 * until it is sent or given up, so a restart loses none; several processes share the
 * work through versionstamp checks.
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { Connectors } from "../connectors/mod.ts";
import { checkConfig, sendEnvelope, type SendResult } from "../delivery/attempt.ts";
import type { OutboundBudget } from "../delivery/outbound_budget.ts";
import { nextRetryDelay } from "../delivery/retry.ts";
import { describeError, type Logger } from "../log.ts";
import type { Db } from "../store/db.ts";
import { getOrg } from "../store/orgs.ts";
import { getDestination } from "../store/destinations.ts";
import type { JobRecord } from "../store/job_record.ts";
import {
  claimJob,
  claimSummary,
  clearToldFailing,
  countDestinationJobs,
  destinationFailingCount,
  dispatchEvent,
  dropEvent,
  dropJob,
  dueEvents,
  dueJobs,
  finishJob,
  getNotificationSettings,
  listNotificationSettings,
  markToldFailing,
  type NewEvent,
  type NotifyJob,
  recordEvent,
  retryJob,
} from "../store/notifications.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { channelsFor, channelTarget } from "./channels.ts";
import { notificationEnvelope, webhookBody } from "./render.ts";
import { lastPeriod, summaryFigures } from "./summary.ts";

/** What the notifier needs. */
export interface NotifierDeps {
  db: Db;
  connectors: Connectors;
  outbound: OutboundBudget;
  config: Pick<Config, "notify" | "retryScheduleMs" | "sweepIntervalMs" | "leaseMs">;
  logger: Logger;
  now?: () => number;
  /** Whether this process sends (default true); a process that only accepts records events. */
  background?: boolean;
}

/** The notifier of one process. */
export interface Notifier {
  /** Records an event in the outbox and wakes the notifier. */
  record(event: NewEvent): Promise<void>;
  /** Wakes the notifier (a test was queued). */
  wake(): void;
  /** Hears every recorded delivery attempt: tells "failing" and "recovered". */
  afterAttempt(job: JobRecord, result: SendResult, options: { paused: boolean }): Promise<void>;
  /** Hears a job failed for good (never awaited by delivery). */
  onFailed(job: JobRecord): void;
  /** One pass now: summaries looked for, due groups to jobs, due jobs sent. */
  runOnce(): Promise<void>;
  /** Stops the background passes and waits for the one under way. */
  close(): Promise<void>;
}

/** Most outbox groups and jobs handled per pass. */
const PER_PASS = 100;
/** How often summaries are looked for. */
const SUMMARY_CHECK_MS = 10 * 60_000;
/** Destinations found with no told-failing mark lately: deliveries to them read nothing. */
const CLEAR_RECHECK_MS = 10_000;
const MAX_CLEAR_TRACKED = 50_000;
/** How long a destination told failing is taken to be so without a KV read. */
const TOLD_RECHECK_MS = 60_000;

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
  const { db, connectors, outbound, config, logger } = deps;
  const now = deps.now ?? Date.now;
  const clear = new Map<string, number>();
  // Destinations this process told failing (or saw told), and when: their next failures
  // within TOLD_RECHECK_MS read nothing (another process may have seen them recover).
  const told = new Map<string, number>();
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
      const org = await getOrg(db, entry.value.orgId);
      if (org === null) {
        await dropEvent(db, entry);
        continue;
      }
      const settings = await getNotificationSettings(db, entry.value.orgId);
      // A disabled organization is told nothing: its events are dropped (docs/notifications.md).
      const channels = org.disabledAt ? [] : channelsFor(settings, entry.value);
      await dispatchEvent(db, entry, { channels, now: now(), groupMs: config.notify.groupMs });
    }
    for (const entry of await dueJobs(db, { now: now(), limit: PER_PASS })) {
      if (closed) return;
      const claimed = await claimJob(db, entry, { now: now(), leaseMs: config.leaseMs });
      if (claimed !== null) await send(claimed);
    }
  }

  /** Sends one claimed job; logs, retries or gives up. */
  async function send(claimed: Deno.KvEntry<NotifyJob>) {
    const job = claimed.value;
    // Deleted or disabled since the job was queued: nothing goes out.
    const org = await getOrg(db, job.orgId);
    if (org === null) return await dropJob(db, claimed);
    if (org.disabledAt) {
      const error = "Not sent: the organization is disabled";
      return await finishJob(db, claimed, { delivered: false, error, now: now() });
    }
    const settings = await getNotificationSettings(db, job.orgId);
    const target = await channelTarget(db, { orgId: job.orgId, channel: job.channel, settings });
    if (!target.ok) {
      return await finishJob(db, claimed, { delivered: false, error: target.error, now: now() });
    }
    const connector = connectors[target.type];
    const checked = checkConfig(connector, target.config);
    if (!checked.ok) {
      const error = `Channel config is not valid: ${checked.error.issues[0]?.message ?? "unknown"}`;
      return await finishJob(db, claimed, { delivered: false, error, now: now() });
    }
    // The webhook connector sends its envelope as the JSON body: here the event's body.
    const envelope = target.type === "webhook"
      ? webhookBody(job.event, now()) as unknown as SubmissionEnvelope
      : notificationEnvelope(job.event, { id: job.id, now: now() });
    const request = outbound.requestOf({ type: target.type, config: checked.config }, {
      orgId: job.orgId,
      bytes: new TextEncoder().encode(JSON.stringify(envelope)).length,
    });
    const budget = await outbound.take(request, now());
    if (!budget.ok) return await retryJob(db, claimed, { dueAt: budget.retryAt, uncounted: true });
    const result = await sendEnvelope(connector, {
      envelope,
      config: checked.config,
      deliveryId: job.id,
      destinationId: job.channel.kind === "chat" ? job.channel.destinationId : job.channel.kind,
      signal: new AbortController().signal,
    });
    const fields = { orgId: job.orgId, type: job.event.type, channel: job.channel.kind };
    if (result.delivered) {
      logger.info("notification sent", { ...fields, attempts: job.attempts });
      return await finishJob(db, claimed, { delivered: true, error: null, now: now() });
    }
    const error = result.unexpected ? "Sending failed: internal error" : result.failure.message;
    const delay = result.failure.permanent ? null : nextRetryDelay(job.attempts, {
      scheduleMs: config.retryScheduleMs,
      retryAfterMs: result.failure.retryAfterMs,
    });
    logger.warn("notification failed", {
      ...fields,
      attempts: job.attempts,
      error,
      final: delay === null,
    });
    if (delay === null) {
      return await finishJob(db, claimed, { delivered: false, error, now: now() });
    }
    await retryJob(db, claimed, { dueAt: now() + delay });
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
    async afterAttempt(job, result, { paused }) {
      const about = { orgId: job.orgId, formId: job.formId, destinationId: job.destinationId };
      const subject = job.destinationId;
      if (result.delivered) {
        const seen = clear.get(subject);
        if (seen !== undefined && now() - seen < CLEAR_RECHECK_MS) return;
        told.delete(subject);
        if (await clearToldFailing(db, subject)) {
          await recordQuietly({ ...about, type: "message.attempt.recovered", subject });
        }
        if (clear.size >= MAX_CLEAR_TRACKED) clear.clear();
        clear.set(subject, now());
        return;
      }
      if (result.failure.blame === "submission") return;
      clear.delete(subject);
      if (paused) {
        await markToldFailing(db, subject);
        const destination = await getDestination(db, job.formId, job.destinationId);
        const held = await countDestinationJobs(db, job.destinationId);
        const detail = destination?.health.reason ?? result.failure.message;
        await recordQuietly({ ...about, type: "endpoint.disabled", subject, detail, held });
        return;
      }
      const toldAt = told.get(subject);
      if (toldAt !== undefined && now() - toldAt < TOLD_RECHECK_MS) return;
      // Consecutive failures: the destination's failing record (kept when pausing is on), else this job's.
      const failures = Math.max(await destinationFailingCount(db, subject), job.attempts);
      if (failures < config.notify.failingAfterAttempts) return;
      if (told.size >= MAX_CLEAR_TRACKED) told.clear();
      const marked = await markToldFailing(db, subject);
      told.set(subject, now());
      if (!marked) return;
      await recordQuietly({
        ...about,
        type: "message.attempt.failing",
        subject,
        detail: result.failure.message,
        count: failures,
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
