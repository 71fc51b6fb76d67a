import type { z } from "zod";
import type { SubmissionEnvelope } from "../submission.ts";
import { redactUrls } from "../redact.ts";
import type { SmtpRelay } from "./smtp/client.ts";
import type { MailMessage } from "./smtp/message.ts";

/** One attempt to hand a submission to one destination. */
export interface DeliveryRequest<C> {
  envelope: SubmissionEnvelope;
  config: C;
  /** Stable id of this (submission, destination) pair: the idempotency key across retries. */
  deliveryId: string;
  destinationId: string;
  signal: AbortSignal;
  /**
   * Processes delivering to this destination, this one included, as the shared pace
   * knows (delivery/pace.ts); a connector that spaces its messages by time spaces them
   * by that many gaps, so that together they keep the service's pace. Absent: one.
   */
  senders?: number;
  /**
   * Where the connector adds the time it waited on formrelay's own limits (a free session
   * to a relay, a chat digest's turn), which says nothing about the receiver: the pace
   * leaves it out.
   */
  ownWait?: OwnWait;
}

/** Milliseconds an attempt waited on formrelay itself (see DeliveryRequest.ownWait). */
export interface OwnWait {
  ms: number;
}

/**
 * What a receiver said about the pace it accepts, read from its answer by the
 * connector (HTTP `Retry-After` and rate-limit headers, a chat service's JSON
 * `retry_after`, an SMTP relay's 421/451). The destination's pace honours it
 * (delivery/pace.ts): a refusal for rate holds the destination's whole queue and slows
 * it, instead of counting as a failure of the one job.
 */
export interface PaceHint {
  /** The receiver refused this attempt for rate, not for what was sent: it is tried again, uncounted. */
  limited?: boolean;
  /**
   * The refusal says the receiver is down for a while (a 503 with Retry-After), not
   * how fast it takes requests: the destination is held, not kept to a rate.
   */
  unavailable?: boolean;
  /** Send nothing to the destination for this long (ms). */
  retryAfterMs?: number;
  /** Requests the receiver still allows in its current window... */
  remaining?: number;
  /** ...and when that window starts afresh (ms from now). */
  resetAfterMs?: number;
}

/** What a successful attempt reports. */
export interface DeliveryReceipt {
  statusCode?: number;
  /** Short human-readable note, e.g. rejected SMTP recipients. Never payload. */
  detail?: string;
  /** The receiver's rate-limit headers (a quota running out holds the destination until reset). */
  pace?: PaceHint;
}

/**
 * Whose fault a failure is: the destination's (unreachable, refusing every delivery:
 * connection, DNS, TLS, time-outs, HTTP 401/403/404/410/5xx, SMTP session and
 * `MAIL FROM` refusals) or this submission's alone (HTTP 400/413/415/422, SMTP
 * refusals of a recipient or of the content). Only the destination's count toward
 * pausing it (store/destination_health.ts).
 */
export type Blame = "destination" | "submission";

/** HTTP statuses that refuse one submission, not every delivery to the destination. */
const SUBMISSION_STATUSES = new Set([400, 413, 415, 422]);

/** Whose fault an HTTP answer that is not a 2xx is (see Blame). */
export function blameOfHttpStatus(status: number): Blame {
  return SUBMISSION_STATUSES.has(status) ? "submission" : "destination";
}

/**
 * A failed attempt; `permanent` failures are not retried. Its message is stored and
 * logged, so any URL in it is cut down to `scheme://host[:port]` (redact.ts).
 */
export class DeliveryError extends Error {
  readonly permanent: boolean;
  /** Whose fault it is; the destination's unless the connector knows otherwise. */
  readonly blame: Blame;
  readonly statusCode?: number;
  /** Server-requested wait before the next attempt (HTTP Retry-After). */
  readonly retryAfterMs?: number;
  /**
   * The service says the destination no longer exists (a deleted chat webhook, a bot
   * removed from its chat): it is paused at once and this submission held, not failed.
   */
  readonly gone: boolean;
  /** What the receiver said about its pace (a refusal for rate: `pace.limited`). */
  readonly pace?: PaceHint;

  constructor(
    message: string,
    options: {
      permanent: boolean;
      blame?: Blame;
      statusCode?: number;
      retryAfterMs?: number;
      gone?: boolean;
      pace?: PaceHint;
      cause?: unknown;
    },
  ) {
    super(redactUrls(message), { cause: options.cause });
    this.name = "DeliveryError";
    this.permanent = options.permanent;
    this.blame = options.blame ?? "destination";
    this.statusCode = options.statusCode;
    this.retryAfterMs = options.retryAfterMs;
    this.gone = options.gone ?? false;
    this.pace = options.pace;
  }
}

/** A destination type: how its config is validated, shown and delivered to. */
export interface Connector<C = unknown> {
  /** zod schema of the config as the admin API accepts it (defaults applied). */
  configSchema: z.ZodType<C>;
  /**
   * The schema a stored config is checked against before each delivery, where it differs:
   * limits added for new configs (the platform relay's recipient cap) must not turn a
   * config stored before them into a permanent failure of submissions already accepted.
   */
  storedConfigSchema?: z.ZodType<C>;
  /** The config with secret values replaced by "********", for list and PATCH answers. */
  redact(config: C): C;
  /** Delivers one envelope; resolves on success, throws DeliveryError on failure. */
  deliver(request: DeliveryRequest<C>): Promise<DeliveryReceipt>;
  /**
   * Mail sending, for the types that send mail (SMTP): a message of the caller's making
   * through a config's relay. The confirmation to a visitor uses it.
   */
  mail?: MailSender<C>;
  /**
   * Sending an owner notice (notify/): the types a notification channel may be (SMTP, the
   * chat services, the operational webhook) render it their own way, never as a
   * submission and never in a digest of submissions.
   */
  notice?: NoticeSender<C>;
}

/**
 * An owner notification as formrelay words it: a title, a few lines and a link to the
 * console, all formrelay's own words (never a receiver's reply, never a submission's
 * fields), and the event as data for the machines (the operational webhook's body).
 */
export interface Notice {
  /** The event's name (`message.attempt.failing`, …). */
  event: string;
  /** What happened, for people: "A destination is failing". */
  title: string;
  /** What a person needs, one line each: which form and destination, since when, what is held. */
  lines: string[];
  /** The console's page for it; null when the deployment's public address is not set. */
  link: { label: string; url: string } | null;
  /** The event as data: the operational webhook's JSON body (Standard Webhooks). */
  data: Record<string, unknown>;
}

/** Sends an owner notice through a channel's config. */
export interface NoticeSender<C = unknown> {
  sendNotice(
    config: C,
    request: { notice: Notice; id: string; signal: AbortSignal },
  ): Promise<DeliveryReceipt>;
}

/**
 * Sends a message of the caller's making through a config's relay (the confirmation to
 * a visitor uses it: its message is not a submission's).
 */
export interface MailSender<C = unknown> {
  sendMail(
    config: C,
    options: { build: (route: MailRoute) => MailMessage; signal: AbortSignal; ownWait?: OwnWait },
  ): Promise<DeliveryReceipt>;
}

/** Where a config's mail goes: the relay, the layout of its variant, sender and recipients. */
export interface MailRoute {
  relay: SmtpRelay;
  layout: "plain" | "alternative";
  from: string;
  to: string[];
  subjectTemplate: string;
}

/** Secret values in admin answers other than the one that stored them. */
export const REDACTED = "********";
