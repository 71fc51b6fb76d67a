import type { Sealer } from "./sealing.ts";

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

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Seals an envelope for storage, bound to its submission id. */
export async function sealEnvelope(
  sealer: Sealer,
  envelope: SubmissionEnvelope,
): Promise<Uint8Array<ArrayBuffer>> {
  const plaintext = encoder.encode(JSON.stringify(envelope));
  return await sealer.seal(plaintext, `envelope:${envelope.submissionId}`);
}

/** Opens an envelope sealed by sealEnvelope. */
export async function openEnvelope(
  sealer: Sealer,
  submissionId: string,
  sealed: Uint8Array<ArrayBuffer>,
): Promise<SubmissionEnvelope> {
  const plaintext = await sealer.open(sealed, `envelope:${submissionId}`);
  return JSON.parse(decoder.decode(plaintext));
}
