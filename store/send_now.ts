/**
 * "Send now": a delivery waiting for its next retry is made due at once, so a tenant who
 * fixed the receiver need not wait out the backoff. Only a pending job moves; one in
 * flight, held for a paused destination, or finished is reported as it is.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { decodeJob, encodeJob, JOB_BYTES, type JobRef, type StoredJob } from "./job_record.ts";
import { jobKey, jobKeyParts, jobsPrefix } from "./keys.ts";
import type { DeliveryRef } from "./redelivery.ts";

/** What "send now" found: the job made due (wake it), or why nothing changed. */
export type SendNow =
  | { sent: JobRef }
  | { state: "in_flight" | "held" | "not_waiting" };

/**
 * Makes the pending job of one delivery of a form due at `now`. The unfinished jobs are
 * scanned by their keys (the delivery id does not hold the acceptance time that leads
 * them); they are few next to the outcomes.
 */
export async function sendNow(
  db: Db,
  delivery: DeliveryRef & { formId: string; now: number },
): Promise<SendNow> {
  const iter = db.kv.list<StoredJob>({ prefix: jobsPrefix() }, { batchSize: 500 });
  for await (const entry of iter) {
    const parts = jobKeyParts(entry.key);
    if (
      parts.submissionId !== delivery.submissionId ||
      parts.destinationId !== delivery.destinationId
    ) continue;
    const job = decodeJob(entry);
    if (job.formId !== delivery.formId) break;
    if (job.state !== "pending") return { state: job.state };
    const next = { ...job, dueAt: Math.min(job.dueAt, delivery.now), updatedAt: delivery.now };
    const ref: JobRef = { ...parts, orgId: job.orgId };
    const versionstamp = await db.batcher.commit({
      apply: (op) => op.check(entry).set(jobKey(next), encodeJob(next)),
      mutations: 1,
      checks: 1,
      bytes: JOB_BYTES,
      wake: [ref],
    });
    // Changed meanwhile: an attempt started, or it finished.
    return versionstamp === null ? { state: "in_flight" } : { sent: ref };
  }
  return { state: "not_waiting" };
}
