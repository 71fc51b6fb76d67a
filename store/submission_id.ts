/**
 * Submission ids are UUIDs of version 7: their first 48 bits are the acceptance time
 * in epoch ms, which also leads the keys of the submission's jobs and envelope. So a
 * delivery id (`<submissionId>.<destinationId>`) names its job's key exactly, and a
 * tenant's redelivery or "send now" reads that one key instead of an index or a scan.
 * An id of another version holds no time, so it names no delivery.
 *
 * @module
 */
import type { JobKeyParts } from "./keys.ts";

/** A new submission id for a submission accepted at `acceptedAt` (epoch ms). */
export function submissionIdAt(acceptedAt: number): string {
  const time = acceptedAt.toString(16).padStart(12, "0");
  // A random version-4 UUID with its time bits and version replaced: 74 random bits stay.
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${crypto.randomUUID().slice(15)}`;
}

/** The acceptance time a submission id holds, or null for an id of another version. */
export function acceptedAtOf(submissionId: string): number | null {
  if (submissionId.length !== 36 || submissionId[14] !== "7") return null;
  const time = Number.parseInt(submissionId.slice(0, 8) + submissionId.slice(9, 13), 16);
  return Number.isSafeInteger(time) ? time : null;
}

/** The key parts of a delivery's job (or retained record); null when its id holds no time. */
export function jobKeyPartsOf(
  delivery: { submissionId: string; destinationId: string },
): JobKeyParts | null {
  const submittedAt = acceptedAtOf(delivery.submissionId);
  return submittedAt === null ? null : { ...delivery, submittedAt };
}
