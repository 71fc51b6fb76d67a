/**
 * The catalogue of error answers: every status and exact text the service answers
 * with (the spec's and CONTRACT's texts, unchanged), and, for the refusals of a
 * submission, its reason (refusal_reasons.ts), which metrics and the form's refusal counts
 * count it under.
 *
 * Routes throw these (`new ApiError(ERRORS.formNotFound)`), ingestion refuses with them
 * by name (ingest/refusal.ts), routes/openapi.ts lists them per operation, and
 * routes/ingest.ts answers and counts a refusal by its entry, so none can drift from the
 * others. A new error answer is added here first.
 *
 * @module
 */
import type { RefusalReason } from "./refusal_reasons.ts";

/** The statuses the service answers errors with (each one Hono can send with a body). */
export type ErrorStatus = 400 | 401 | 403 | 404 | 405 | 408 | 409 | 413 | 415 | 429 | 500 | 503;

/** One error answer: its status, its exact text and, for a refused submission, why. */
export interface ErrorSpec {
  readonly status: ErrorStatus;
  readonly text: string;
  /** Set on the answers ingestion can give; a refusal is counted by it. */
  readonly reason?: RefusalReason;
}

/** Every error answer of the service, by name. */
export const ERRORS = {
  // Any route.
  notFound: { status: 404, text: "Not found", reason: "not_found" },
  methodNotAllowed: { status: 405, text: "Method not allowed", reason: "method" },
  internal: { status: 500, text: "Internal error", reason: "error" },
  bodyTimeout: { status: 408, text: "Request body not received in time", reason: "body_timeout" },
  serverBusy: { status: 503, text: "Server busy: try again later", reason: "busy" },

  // Ingestion, in the order of its checks.
  submissionTooLarge: { status: 413, text: "Payload too large (max 128KB)", reason: "size" },
  submissionTypeJson: {
    status: 415,
    text: "Unsupported content type: use application/json",
    reason: "type",
  },
  submissionTypeAny: {
    status: 415,
    text: "Unsupported content type: use application/json, " +
      "application/x-www-form-urlencoded or multipart/form-data",
    reason: "type",
  },
  formEndpointNotFound: {
    status: 404,
    text: "Form endpoint not found or disabled",
    reason: "not_found",
  },
  originNotAllowed: { status: 403, text: "Origin is not allowed for this form", reason: "origin" },
  rateLimited: { status: 429, text: "Too many submissions", reason: "rate_limit" },
  backlogFull: {
    status: 503,
    text: "Too many submissions waiting for delivery: try again later",
    reason: "backlog",
  },
  invalidContentLength: { status: 400, text: "Invalid Content-Length header", reason: "invalid" },
  invalidJsonPayload: { status: 400, text: "Invalid JSON payload", reason: "invalid" },
  invalidFormPayload: { status: 400, text: "Invalid form payload", reason: "invalid" },
  fileUpload: { status: 400, text: "File uploads are not supported", reason: "invalid" },
  captchaRequired: { status: 400, text: "Captcha token is required", reason: "captcha" },
  captchaInvalid: { status: 400, text: "Invalid captcha token", reason: "captcha" },
  // CONTRACT: a provider that gives no verdict is `400 Invalid captcha token` too (fail
  // closed); it is counted apart, and its answer's `detail` and `retryAfter` say so.
  captchaUnavailable: { status: 400, text: "Invalid captcha token", reason: "captcha_unavailable" },
  storeFailed: {
    status: 503,
    text: "Submission could not be stored: try again",
    reason: "store_failed",
  },

  // Admin API.
  missingTenantKey: { status: 401, text: "Missing x-tenant-key" },
  invalidTenantKey: { status: 401, text: "Invalid tenant key" },
  orgDisabled: {
    status: 401,
    text: "Organization disabled: the host of this service has disabled it",
  },
  adminContentType: { status: 415, text: "Unsupported content type: use application/json" },
  adminTooLarge: { status: 413, text: "Payload too large (max 64KB)" },
  invalidJsonBody: { status: 400, text: "Invalid JSON body" },
  validation: { status: 400, text: "Validation error" },
  formNotFound: { status: 404, text: "Form not found" },
  destinationNotFound: { status: 404, text: "Destination not found" },
  deliveryNotFound: { status: 404, text: "Delivery not found" },
  configTooLarge: { status: 413, text: "Destination config too large (max 40KB)" },
  redeliveryDisabled: {
    status: 409,
    text: "Destination is disabled: enable it to redeliver",
  },
  redeliveryPaused: {
    status: 409,
    text: "Destination is paused: resume it (POST …/resume), which delivers what it holds",
  },
  redeliveryUnderWay: { status: 409, text: "Delivery is already under way" },
  redeliveryGone: {
    status: 409,
    text: "The submission's data is no longer held: delivered, or failed longer ago than " +
      "FAILED_RETENTION_HOURS, or expired",
  },
  redeliveryNotRetained: {
    status: 409,
    text: "The submission's data is no longer held: failed submissions are not retained " +
      "on this service (FAILED_RETENTION_HOURS=0)",
  },

  // Admin API limits (routes/limits.ts): 429 with Retry-After and `retryAfter`.
  tooManyOperations: { status: 429, text: "Too many requests: try again later" },
  testSendUnderWay: {
    status: 429,
    text: "A test send to this destination is already under way",
  },
  tooManyTestSends: { status: 429, text: "Too many test sends: try again later" },
  tooManyConfirmations: {
    status: 429,
    text: "Too many confirmation emails to this address: try again later",
  },
  outboundLimit: { status: 429, text: "Outbound limit reached: try again later" },
  notifyAddressNotFound: { status: 404, text: "Notification address not found" },
  addressConfirmed: { status: 409, text: "Address already confirmed" },
  sendNowNotWaiting: {
    status: 409,
    text: "Delivery is not waiting for a retry: delivered, failed, or not of this form",
  },

  // Service endpoints.
  kvNotAnswering: { status: 503, text: "KV is not answering" },
  notReady: { status: 503, text: "Not ready" },
  invalidMetricsToken: { status: 401, text: "Invalid metrics token" },
} as const satisfies Record<string, ErrorSpec>;

/** The 415 of ingestion, whose text names the types this deployment takes. */
export function submissionTypeError(variant: "any" | "json"): ErrorSpec {
  return variant === "json" ? ERRORS.submissionTypeJson : ERRORS.submissionTypeAny;
}

/** The refusals of a submission in the catalogue: each status with its reason. */
export const INGEST_REFUSALS: { status: number; reason: RefusalReason }[] = (
  Object.values(ERRORS) as ErrorSpec[]
).flatMap((error) =>
  error.reason === undefined ? [] : [{ status: error.status, reason: error.reason }]
);

/**
 * An error answer of the catalogue with the contract's body `{ ok: false, error,
 * ...details }`; app.ts answers it. Framework-free, so that any layer may throw it.
 */
export class ApiError extends Error {
  readonly status: ErrorStatus;
  readonly details: Record<string, unknown>;
  constructor(error: ErrorSpec, details: Record<string, unknown> = {}) {
    super(error.text);
    this.status = error.status;
    this.details = details;
  }
}

/** The JSON error body of the contract. */
export function errorBody(error: string, details: Record<string, unknown> = {}) {
  return { ok: false as const, error, ...details };
}
