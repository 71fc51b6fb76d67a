/**
 * Notice jobs, a job kind of the delivery engine beside submission deliveries and the
 * visitor's confirmation: one owner notification to one channel (email, a chat
 * destination, the operational webhook), stored by store/notice_jobs.ts. The engine
 * claims, leases, retries and dispatches them with the same code as deliveries: each
 * organization's channel is a lane of its own in the dispatcher (`notice:<orgId>:<channel>`),
 * so no organization's notices wait on another's channels, at most NOTICE_IN_FLIGHT run
 * at once per lane, and each send has a time-out of its own (NOTICE_TIMEOUT_MS), far
 * below a submission's: a notice is short, and a receiver that does not answer holds
 * only its own lane. Sends count toward the organization's outbound budget (and so the
 * platform relay's caps) as deliveries do.
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { DestinationType } from "../connectors/registry.ts";
import { type Connector, DeliveryError } from "../connectors/types.ts";
import { describeError, type Logger } from "../log.ts";
import { channelTarget } from "../notify/channels.ts";
import { aboutOf } from "../notify/about.ts";
import { noticeOf } from "../notify/render.ts";
import type { Db } from "../store/db.ts";
import type { JobRef } from "../store/job_record.ts";
import {
  type ClaimedNotice,
  claimNotice,
  dropNotice,
  finishNotice,
  type NoticeRef,
  retryNotice,
} from "../store/notice_jobs.ts";
import { getNotificationSettings } from "../store/notifications.ts";
import { getOrg } from "../store/orgs.ts";
import { type AttemptResult, checkConfig } from "./attempt.ts";
import type { OutboundBudget } from "./outbound_budget.ts";
import { nextRetryDelay } from "./retry.ts";

/** Notices in flight at most per organization and channel. */
export const NOTICE_IN_FLIGHT = 2;
/** How long one notice's send may take before it counts as failed (and is retried). */
export const NOTICE_TIMEOUT_MS = 5_000;

const LANE = "notice:";
/** The held reason of a notice whose organization was deleted: the job goes without a trace. */
const ORG_DELETED = "organization deleted";

/** A notice job as the dispatcher holds it: its lane is its organization's channel. */
export function noticeJobRef(ref: NoticeRef): JobRef {
  return {
    submittedAt: 0,
    submissionId: ref.id,
    destinationId: `${LANE}${ref.orgId}:${ref.channel}`,
    orgId: ref.orgId,
  };
}

/** Whether a dispatcher lane is a notice lane (else a destination's). */
export function isNoticeLane(destinationId: string): boolean {
  return destinationId.startsWith(LANE);
}

/** Claiming, attempting and recording notice jobs. */
export interface NoticeJobs {
  /** Claims a woken notice job; null when it is not there to claim. */
  claim(ref: JobRef): Promise<ClaimedNotice | null>;
  /** Sends a claimed notice to its channel as the settings are now. */
  attempt(claimed: ClaimedNotice, signal: AbortSignal): Promise<AttemptResult>;
  /** Ends the job, or puts it back for a retry, after what the attempt came to. */
  record(claimed: ClaimedNotice, result: AttemptResult): Promise<void>;
  /** Puts a job back at once, uncounted (the engine is closing). */
  handBack(claimed: ClaimedNotice): Promise<void>;
}

/** A permanent failure of this notice alone. */
function refused(message: string): DeliveryError {
  return new DeliveryError(message, { permanent: true, blame: "submission" });
}

/** Notice jobs over the service's connectors and outbound budget. */
export function createNoticeJobs(deps: {
  db: Db;
  connectors: Record<DestinationType, Connector>;
  outbound?: OutboundBudget;
  config: Pick<Config, "retryScheduleMs" | "leaseMs" | "publicUrl">;
  logger: Logger;
  now: () => number;
}): NoticeJobs {
  const { db, connectors, outbound, config, logger, now } = deps;

  async function attempt(claimed: ClaimedNotice, signal: AbortSignal): Promise<AttemptResult> {
    const { job } = claimed;
    // Deleted or disabled since the job was queued: nothing goes out (docs/notifications.md).
    const org = await getOrg(db, job.orgId);
    if (org === null) return { delivered: false, held: true, reason: ORG_DELETED };
    if (org.disabledAt) throw refused("Not sent: the organization is disabled");
    const settings = await getNotificationSettings(db, job.orgId);
    const target = await channelTarget(db, { orgId: job.orgId, channel: job.channel, settings });
    if (!target.ok) throw refused(target.error);
    const connector = connectors[target.type];
    const checked = checkConfig(connector, target.config);
    if (!checked.ok) {
      const issue = checked.error.issues[0]?.message ?? "unknown";
      throw refused(`Channel config is not valid: ${issue}`);
    }
    if (connector.notice === undefined) throw refused("This channel type takes no notices");
    const notice = noticeOf(job.event, {
      ...await aboutOf(db, job.event),
      consoleUrl: config.publicUrl,
      now: now(),
    });
    if (outbound) {
      const request = outbound.requestOf({ type: target.type, config: checked.config }, {
        orgId: job.orgId,
        bytes: new TextEncoder().encode(JSON.stringify(notice)).length,
      });
      const answer = await outbound.take(request, now());
      if (!answer.ok) {
        return { delivered: false, deferred: { until: answer.retryAt, reason: answer.reason } };
      }
    }
    const receipt = await connector.notice.sendNotice(checked.config, {
      notice,
      id: job.id,
      signal: AbortSignal.any([signal, AbortSignal.timeout(NOTICE_TIMEOUT_MS)]),
    });
    return { delivered: true, receipt };
  }

  async function record(claimed: ClaimedNotice, result: AttemptResult) {
    const { job } = claimed;
    if ("deferred" in result) {
      return await retryNotice(db, claimed, { dueAt: result.deferred.until, uncounted: true });
    }
    if ("held" in result && result.reason === ORG_DELETED) return await dropNotice(db, claimed);
    if ("held" in result) return await retryNotice(db, claimed, { dueAt: now(), uncounted: true });
    const fields = { orgId: job.orgId, type: job.event.type, channel: job.channel.kind };
    if (result.delivered) {
      logger.info("notification sent", { ...fields, attempts: job.attempts });
      return await finishNotice(db, claimed, { delivered: true, error: null, now: now() });
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
      return await finishNotice(db, claimed, { delivered: false, error, now: now() });
    }
    await retryNotice(db, claimed, { dueAt: now() + delay });
  }

  return {
    claim: (ref) =>
      claimNotice(db, { orgId: ref.orgId, id: ref.submissionId }, {
        now: now(),
        leaseMs: config.leaseMs,
      }),
    attempt: (claimed, signal) =>
      attempt(claimed, signal).catch((error) => {
        if (error instanceof DeliveryError) {
          return { delivered: false, failure: error, unexpected: false };
        }
        logger.error("notification attempt failed", { error: describeError(error) });
        const failure = new DeliveryError("Sending failed: internal error", { permanent: false });
        return { delivered: false, failure, unexpected: true };
      }),
    record,
    handBack: (claimed) => retryNotice(db, claimed, { dueAt: now(), uncounted: true }),
  };
}
