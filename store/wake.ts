/**
 * Queue wake-up messages: what a KV queue message carries to wake delivery jobs. A
 * wake-up is only a hint; the job in KV is the truth, so a lost or duplicate message
 * does no harm.
 *
 * @module
 */
import type { JobRef } from "./job_record.ts";

/**
 * A queue wake-up for jobs: compact [submittedAt, submissionId, destinationId, orgId]
 * tuples.
 */
export interface WakeMessage {
  wake: [number, string, string, string][];
  /** The batcher (batcher.ts) whose process woke these jobs itself, when it did. */
  from?: string;
}

/** Most jobs one wake-up message names, within the 64 KiB message limit (about 52 KB). */
export const MAX_WAKE_REFS = 400;

/** A queue wake-up to send with a commit. */
export interface WakeUp {
  message: unknown;
  delayMs: number;
}

/** The wake-up message for some jobs, marked with its `from` when its process woke them itself. */
export function wakeMessage(refs: JobRef[], from?: string): WakeMessage {
  const wake: WakeMessage["wake"] = refs.map((
    r,
  ) => [r.submittedAt, r.submissionId, r.destinationId, r.orgId]);
  return from === undefined ? { wake } : { wake, from };
}

/** Type guard for wake-up messages read from the KV queue. */
export function isWakeMessage(value: unknown): value is WakeMessage {
  const wake = (value as WakeMessage | null)?.wake;
  return Array.isArray(wake) &&
    wake.every((r) =>
      Array.isArray(r) && typeof r[0] === "number" && typeof r[1] === "string" &&
      typeof r[2] === "string" && typeof r[3] === "string"
    );
}

/** The jobs a wake-up message names. */
export function wakeRefs(message: WakeMessage): JobRef[] {
  return message.wake.map(([submittedAt, submissionId, destinationId, orgId]) => ({
    submittedAt,
    submissionId,
    destinationId,
    orgId,
  }));
}
