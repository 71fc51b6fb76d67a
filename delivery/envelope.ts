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
