/**
 * Finding jobs to run: wake-ups from the KV queue, and the scan for due jobs (pending
 * ones and expired leases) that the sweep runs where there is no queue or a wake-up
 * was lost.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { decodeJob, type JobRef, type StoredJob } from "./job_record.ts";
import { jobsPrefix } from "./keys.ts";
import { isWakeMessage, type WakeMessage, wakeRefs } from "./wake.ts";

/**
 * Calls `onWake` with the jobs each wake-up message of the KV queue names (other
 * messages are ignored, and so are this process's own for jobs it woke itself when it
 * stored them: during a burst, reading them back cost the JS thread a few µs a
 * submission); settles when the KV is closed.
 */
export function listenForWakes(db: Db, onWake: (refs: () => JobRef[]) => void): Promise<void> {
  return db.kv.listenQueue((message) => {
    if ((message as WakeMessage | null)?.from === db.batcher.sender) return;
    if (isWakeMessage(message)) onWake(() => wakeRefs(message));
  });
}

/**
 * Jobs due by `now` (pending ones and expired leases), oldest first, at most `limit`,
 * passing over those `skip` names (already woken).
 */
export async function listDueJobs(
  db: Db,
  options: { now: number; limit: number; skip?: (ref: JobRef) => boolean },
): Promise<JobRef[]> {
  const refs: JobRef[] = [];
  for await (const entry of db.kv.list<StoredJob>({ prefix: jobsPrefix() }, { batchSize: 500 })) {
    const job = decodeJob(entry);
    if (job.dueAt > options.now || options.skip?.(job)) continue;
    const { submittedAt, submissionId, destinationId, orgId } = job;
    refs.push({ submittedAt, submissionId, destinationId, orgId });
    if (refs.length >= options.limit) break;
  }
  return refs;
}
