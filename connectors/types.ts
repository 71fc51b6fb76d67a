import type { z } from "zod";
import type { SubmissionEnvelope } from "../submission.ts";
import { redactUrls } from "../redact.ts";

/** One attempt to hand a submission to one destination. */
export interface DeliveryRequest<C> {
  envelope: SubmissionEnvelope;
  config: C;
  /** Stable id of this (submission, destination) pair: the idempotency key across retries. */
  deliveryId: string;
  destinationId: string;
  signal: AbortSignal;
}

/** What a successful attempt reports. */
export interface DeliveryReceipt {
  statusCode?: number;
  /** Short human-readable note, e.g. rejected SMTP recipients. Never payload. */
  detail?: string;
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

  constructor(
    message: string,
    options: {
      permanent: boolean;
      blame?: Blame;
      statusCode?: number;
      retryAfterMs?: number;
      gone?: boolean;
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
  }
}

/** A destination type: how its config is validated, shown and delivered to. */
export interface Connector<C = unknown> {
  /** zod schema of the config as the admin API accepts it (defaults applied). */
  configSchema: z.ZodType<C>;
  /** The config with secret values replaced by "********", for list and PATCH answers. */
  redact(config: C): C;
  /** Delivers one envelope; resolves on success, throws DeliveryError on failure. */
  deliver(request: DeliveryRequest<C>): Promise<DeliveryReceipt>;
}

/** Secret values in admin answers other than the one that stored them. */
export const REDACTED = "********";
