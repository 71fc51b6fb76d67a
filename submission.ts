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

/**
 * Freezes an envelope and everything in it. The envelope a process accepted is delivered
 * as it is to each of the submission's destinations there (delivery/claim_hints.ts): no
 * delivery may change what the next one sends.
 */
export function freezeEnvelope(envelope: SubmissionEnvelope): Readonly<SubmissionEnvelope> {
  return deepFreeze(envelope);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}
