/**
 * A submission refused by ingestion, in the domain's terms: which answer of the
 * catalogue (errors.ts) it gets, so its reason (refusal_reasons.ts), and what the page
 * is told beside it (`retryAfter`, `detail`). The steps throw it; routes/ingest.ts alone
 * turns it into the contract's status and text, headers included, and counts it.
 *
 * @module
 */
import { ERRORS, type ErrorSpec } from "../errors.ts";
import type { RefusalReason } from "../refusal_reasons.ts";

/** The catalogue's answers that refuse a submission (those with a reason). */
export type RefusalAnswer = {
  [K in keyof typeof ERRORS]: (typeof ERRORS)[K] extends { reason: RefusalReason } ? K : never;
}[keyof typeof ERRORS];

/** Why a submission was refused and what its visitor is told beside the contract's text. */
export class Refusal extends Error {
  readonly answer: RefusalAnswer;
  readonly reason: RefusalReason;
  /** Seconds the page is asked to wait before trying again (also the Retry-After header). */
  readonly retryAfter: number | undefined;
  /** What the answer says beside the contract's text. */
  readonly detail: string | undefined;
  /** Whether the connection should end with the answer (a body cut short, a client over budget). */
  readonly closeConnection: boolean;
  constructor(
    answer: RefusalAnswer,
    options: { retryAfter?: number; detail?: string; closeConnection?: boolean } = {},
  ) {
    const error: ErrorSpec = ERRORS[answer];
    super(error.text);
    this.answer = answer;
    this.reason = error.reason!;
    this.retryAfter = options.retryAfter;
    this.detail = options.detail;
    this.closeConnection = options.closeConnection ?? false;
  }
}
