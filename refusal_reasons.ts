/**
 * Why a submission was refused or did not reach its form's destinations: the one
 * vocabulary of refusal reasons. The error catalogue (errors.ts) gives each
 * refusal of ingestion its reason; `/metrics` labels `formrelay_submissions_refused_total`
 * with it (metrics.ts); a known form's refusals are counted for its tenant under the same
 * name (store/refusals.ts: `GET /forms/:id/refusals`, the console's refusals card, the
 * notification summary's `refused_<reason>` figures). No layer translates one into
 * another.
 *
 * @module
 */

/** Every refusal reason, with what it stands for. */
export const REFUSAL_REASONS = [
  /** 413: the body is over 128 KB. */
  "size",
  /** 415: a content type ingestion does not take. */
  "type",
  /** 404: no such form (or path), or the form is disabled. */
  "not_found",
  /** 405: not a POST. */
  "method",
  /** 403: the page's origin is not among the form's allowed origins. */
  "origin",
  /** 429: one client over the form's rate limit. */
  "rate_limit",
  /** 400: the body could not be read as the form's data (or carried a file). */
  "invalid",
  /** 400: the captcha token missing or refused. */
  "captcha",
  /** 400 with Retry-After: the captcha provider gave no verdict. */
  "captcha_unavailable",
  /** 408: the body did not arrive in time. */
  "body_timeout",
  /** 503: the memory budget of bodies being read, or the organization's rule matching, is full. */
  "busy",
  /** 503: the organization's delivery backlog is full. */
  "backlog",
  /** 503: the submission's KV commit failed. */
  "store_failed",
  /** Answered as accepted (202) and dropped: the honeypot or a spam rule caught it. */
  "spam",
  /** Accepted, but no enabled destination (or none whose conditions matched) takes it. */
  "nowhere",
  /** 500: an unexpected error. */
  "error",
  /** Any other status (metrics only). */
  "other",
] as const;

/** One of REFUSAL_REASONS. */
export type RefusalReason = typeof REFUSAL_REASONS[number];

/**
 * The reasons a form's refusals are counted under for its tenant, in the order the API
 * lists them: what its visitors, its site or its captcha provider caused; what the
 * service turned away asking the visitor to try again (its backlog or body budget full,
 * a failed commit), since a visitor who does not try again is a message the owner never
 * gets; what spam rules caught; and what went nowhere. Answers without a known form, a
 * body that did not arrive in time and the service's own errors are for the operator's
 * metrics.
 */
export const FORM_REFUSAL_REASONS = [
  "origin",
  "captcha",
  "captcha_unavailable",
  "rate_limit",
  "size",
  "type",
  "invalid",
  "backlog",
  "busy",
  "store_failed",
  "spam",
  "nowhere",
] as const satisfies readonly RefusalReason[];

/** One of FORM_REFUSAL_REASONS. */
export type FormRefusalReason = typeof FORM_REFUSAL_REASONS[number];

/** Whether a reason is counted per form for its tenant. */
export function isFormRefusalReason(reason: string): reason is FormRefusalReason {
  return (FORM_REFUSAL_REASONS as readonly string[]).includes(reason);
}
