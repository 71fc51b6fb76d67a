/**
 * Destination health: consecutive final failures per destination, and the automatic
 * disabling of a destination that keeps failing, so that a tenant sees it in the
 * destination list instead of finding out from missing submissions.
 *
 * @module
 */
import { redactUrls } from "../redact.ts";
import { type Db, retryAtomic } from "./db.ts";
import type { DestinationRecord } from "./destinations.ts";
import type { JobRecord } from "./job_record.ts";
import { destinationFailuresKey, destinationKey } from "./keys.ts";
import { OUTCOME_TTL_MS } from "./outcomes.ts";

/** Longest last-error text kept in `disabledReason`. */
const MAX_REASON_ERROR = 500;

/**
 * The reason shown on a destination the service disabled. Its URLs are cut down once
 * more: a job's last error may have been written by an older version.
 */
function autoDisableReason(threshold: number, lastError: string | null): string {
  const error = redactUrls(lastError ?? "unknown error").slice(0, MAX_REASON_ERROR);
  return `Disabled after ${threshold} consecutive failed deliveries; last error: ${error}`;
}

/**
 * Records a job's final outcome in its destination's consecutive-failure count: a
 * delivery resets the count, a failure adds one, and the failure that reaches
 * `threshold` disables the destination in the same atomic commit. Failures of a
 * destination that is already disabled or deleted are not counted (its pending jobs
 * fail because of that, not because of the receiver). `threshold` 0 records nothing.
 */
export async function recordFinalOutcome(
  db: Db,
  job: Pick<JobRecord, "formId" | "destinationId" | "lastError">,
  status: "delivered" | "failed",
  options: { threshold: number },
): Promise<void> {
  const { threshold } = options;
  if (threshold <= 0) return;
  const counterKey = destinationFailuresKey(job.destinationId);
  const recordKey = destinationKey(job.formId, job.destinationId);

  if (status === "delivered") {
    // The common case reads one key and writes nothing.
    await retryAtomic(async () => {
      const counter = await db.kv.get<number>(counterKey);
      if (counter.value === null) return { op: null, result: undefined };
      return { op: db.kv.atomic().check(counter).delete(counterKey), result: undefined };
    });
    return;
  }

  const disabled = await retryAtomic(async () => {
    const [counter, destination] = await db.kv.getMany<[number, DestinationRecord]>([
      counterKey,
      recordKey,
    ]);
    if (destination.value === null) {
      // Deleted: leave no count behind (a late outcome after deleteDestination).
      const op = counter.value === null ? null : db.kv.atomic().check(counter).delete(counterKey);
      return { op, result: false };
    }
    if (!destination.value.isEnabled) return { op: null, result: false };
    const count = (counter.value ?? 0) + 1;
    // Kept as long as outcomes are, so the counts of deleted forms' destinations go too.
    const op = db.kv.atomic().check(counter).set(counterKey, count, { expireIn: OUTCOME_TTL_MS });
    if (count < threshold) return { op, result: false };
    const now = new Date().toISOString();
    const updated: DestinationRecord = {
      ...destination.value,
      isEnabled: false,
      disabledReason: autoDisableReason(count, job.lastError),
      disabledAt: now,
      updatedAt: now,
    };
    return { op: op.check(destination).set(recordKey, updated), result: true };
  });
  if (disabled) db.formVersion.bump();
}
