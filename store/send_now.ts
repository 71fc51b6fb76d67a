/**
 * "Send now": a delivery waiting for its next retry is made due at once, so a tenant who
 * fixed the receiver need not wait out the backoff. Only a pending job moves; one in
 * flight, held for a paused destination, or finished is reported as it is.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { decodeJob, encodeJob, JOB_BYTES, type JobRef, type StoredJob } from "./job_record.ts";
import { jobKey, jobKeyParts } from "./keys.ts";
import type { DeliveryRef } from "./redelivery.ts";
import { jobKeyPartsOf } from "./submission_id.ts";

/** What "send now" found: the job made due (wake it), or why nothing changed. */
export type SendNow =
  | { sent: JobRef }
  | { state: "in_flight" | "held" | "not_waiting" };

/**
 * The unfinished job of a delivery, read by its key, which the submission id gives
 * (submission_id.ts); null when there is none or the id holds no acceptance time.
 */
async function findJob(db: Db, delivery: DeliveryRef): Promise<Deno.KvEntry<StoredJob> | null> {
  const parts = jobKeyPartsOf(delivery);
  if (parts === null) return null;
  const entry = await db.kv.get<StoredJob>(jobKey(parts));
  return entry.versionstamp === null ? null : entry;
}

/** Makes the pending job of one delivery of a form due at `now`. */
export async function sendNow(
  db: Db,
  delivery: DeliveryRef & { formId: string; now: number },
): Promise<SendNow> {
  const entry = await findJob(db, delivery);
  if (entry === null) return { state: "not_waiting" };
  const job = decodeJob(entry);
  if (job.formId !== delivery.formId) return { state: "not_waiting" };
  if (job.state !== "pending") return { state: job.state };
  const next = { ...job, dueAt: Math.min(job.dueAt, delivery.now), updatedAt: delivery.now };
  const ref: JobRef = { ...jobKeyParts(entry.key), orgId: job.orgId };
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
