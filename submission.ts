/**
 * The submission envelope: what every destination receives for one accepted submission
 * (spec section 2.4). A module of its own so that connectors, delivery, ingestion and
 * the store all import it from here, and none of them from another's layer.
 *
 * @module
 */

/** The submission as delivered to every destination (spec section 2.4). */
export interface SubmissionEnvelope {
  submissionId: string;
  formId: string;
  formName: string;
  payload: unknown;
  metadata: {
    origin: string | null;
    ip: string | null;
    userAgent: string | null;
    referer: string | null;
    submittedAt: string;
  };
}
