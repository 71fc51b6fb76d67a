/**
 * "Send now": a delivery waiting for its next retry is made due at once, so a tenant who
 * fixed the receiver need not wait out the backoff. Only a pending job moves; one in
 * flight, held for a paused destination, or finished is reported as it is. The same for
 * all of a destination's waiting deliveries at once ({@linkcode sendWaitingNow}): on the
 * tenant's word, and when the destination recovers (a delivery after failures, or a
 * resume). Made due, they are still sent at the destination's pace (delivery/pace.ts):
 * the dispatcher admits as many at a time as the receiver has shown it takes.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { decodeJob, encodeJob, JOB_BYTES, type JobRef, type StoredJob } from "./job_record.ts";
import { jobKey, jobKeyParts } from "./keys.ts";
import { type DeliveryRef, destinationJobs } from "./redelivery.ts";
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

/** What "send all waiting now" did to a destination's deliveries. */
export interface SentWaiting {
  /** Waiting for a retry, now due (wake them). */
  sent: JobRef[];
  /** Being attempted already (or changed meanwhile). */
  inFlight: number;
  /** Held for a paused destination: a resume releases them. */
  held: number;
}

/** Commits made at once at most; the batcher groups them. */
const SEND_WAITING_CONCURRENCY = 50;

/**
 * Makes every delivery of a form's destination that waits for its next retry due at
 * `now`. Jobs never attempted are due already and not looked for; held ones are left to
 * a resume; each change is checked against the version read, so a job that moved on
 * meanwhile is counted as in flight and left alone.
 */
export async function sendWaitingNow(
  db: Db,
  selection: { formId: string; destinationId: string; now: number },
): Promise<SentWaiting> {
  const result: SentWaiting = { sent: [], inFlight: 0, held: 0 };
  const { now } = selection;
  let commits: Promise<void>[] = [];
  for await (const { entry, job } of destinationJobs(db, selection)) {
    if (job.state === "held") result.held++;
    if (job.state === "in_flight") result.inFlight++;
    if (job.state !== "pending") continue;
    const ref: JobRef = { ...jobKeyParts(entry.key), orgId: job.orgId };
    if (job.dueAt <= now) {
      result.sent.push(ref);
      continue;
    }
    const next = { ...job, dueAt: now, updatedAt: now };
    commits.push(
      db.batcher.commit({
        apply: (op) => op.check(entry).set(jobKey(next), encodeJob(next)),
        mutations: 1,
        checks: 1,
        bytes: JOB_BYTES,
        wake: [ref],
      }).then((versionstamp) => {
        if (versionstamp === null) result.inFlight++;
        else result.sent.push(ref);
      }),
    );
    if (commits.length >= SEND_WAITING_CONCURRENCY) {
      await Promise.all(commits);
      commits = [];
    }
  }
  await Promise.all(commits);
  return result;
}
