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
 * Calls `onWake` with the jobs each wake-up message of the KV queue names; settles when
 * the KV is closed. Other messages are ignored, and so are those for jobs that the
 * process which stored them woke itself (marked with its `from`): that process is
 * delivering them. Read in another process, they only raced it for the same jobs: a
 * claim that lost failed the whole merged commit it was part of, whose parts were then
 * committed one by one. Should that process stop first, its jobs are due and the sweep
 * brings them in. Read back in the process itself, they would cost the JS thread time
 * in a burst (both measured: docs/design.md, "Processes pass over each other's marked
 * wake-ups").
 */
export function listenForWakes(db: Db, onWake: (refs: () => JobRef[]) => void): Promise<void> {
  return db.kv.listenQueue((message) => {
    if ((message as WakeMessage | null)?.from !== undefined) return;
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
