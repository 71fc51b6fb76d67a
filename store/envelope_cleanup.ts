/**
 * Envelope cleanup after a job ends: the envelope goes with the last job of its
 * submission (retained failed deliveries count as jobs: their envelope stays until
 * their retention ends, FAILED_RETENTION_HOURS). A finishing job either deletes it in
 * its own commit, leaves it to sibling jobs that this process holds unfinished (they
 * see to it when they end), or leaves a marker and checks right after the commit whether
 * any sibling is left; the marker outlives a crash between the two, so the sweep can
 * finish the check.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { deleteChunks } from "./envelope.ts";
import type { JobRecord } from "./job_record.ts";
import {
  envelopeCheckKey,
  envelopeCheckKeyParts,
  envelopeChecksPrefix,
  jobKey,
  type JobKeyParts,
  jobsOfSubmissionPrefix,
  retainedOfSubmissionPrefix,
} from "./keys.ts";

/**
 * What happens to the sealed envelope when a job ends: deleted in the same commit
 * (every sibling job is known to be finished); left to the unfinished siblings named,
 * which the commit checks unchanged since this process claimed or stored them (so they
 * still have to end, and the last to end cleans up; if one changed, the commit fails);
 * or marked for a check after the commit (whether any sibling is left can only be
 * known once this commit is in).
 */
export type EnvelopeCleanup = "delete" | "check" | { leaveTo: HeldSibling[] };

/** A sibling job as this process holds it: its identity and the versionstamp it has. */
export interface HeldSibling {
  ref: JobKeyParts;
  versionstamp: string;
}

interface Marker {
  chunks: number;
  markedAt: number;
}

/**
 * Adds a finishing job's cleanup to its commit: the envelope's deletion, the checks of
 * the siblings it is left to, or a marker.
 */
export function applyEnvelopeCleanup(
  op: Deno.AtomicOperation,
  job: JobKeyParts & Pick<JobRecord, "chunks">,
  cleanup: EnvelopeCleanup,
): void {
  if (cleanup === "delete") {
    deleteChunks(op, job);
  } else if (cleanup === "check") {
    op.set(envelopeCheckKey(job), { chunks: job.chunks, markedAt: Date.now() } satisfies Marker);
  } else {
    for (const { ref, versionstamp } of cleanup.leaveTo) {
      op.check({ key: jobKey(ref), versionstamp });
    }
  }
}

/** Whether any entry has the prefix. */
async function anyUnder(db: Db, prefix: Deno.KvKey): Promise<boolean> {
  for await (const _ of db.kv.list({ prefix }, { limit: 1 })) return true;
  return false;
}

/**
 * The check after a finishing commit: deletes the envelope when no job of the
 * submission is left (nor, with `retained`, a retained failed delivery), and the
 * job's marker either way. Of sibling jobs finishing at once, the last to commit
 * always sees none left (a second delete is harmless).
 */
export async function deleteEnvelopeIfLast(
  db: Db,
  job: JobKeyParts & Pick<JobRecord, "chunks">,
  options: { retained: boolean },
): Promise<void> {
  const { submittedAt, submissionId } = job;
  const last = !await anyUnder(db, jobsOfSubmissionPrefix(submittedAt, submissionId)) &&
    !(options.retained &&
      await anyUnder(db, retainedOfSubmissionPrefix(submittedAt, submissionId)));
  await db.batcher.commit({
    apply(op) {
      op.delete(envelopeCheckKey(job));
      if (last) deleteChunks(op, job);
    },
    mutations: 1 + (last ? job.chunks : 0),
  });
}

/**
 * Finishes the envelope checks that a crash interrupted: markers older than
 * `olderThanMs` (younger ones belong to checks under way).
 */
export async function sweepEnvelopeMarkers(
  db: Db,
  options: { now: number; olderThanMs: number; limit: number },
): Promise<number> {
  let checked = 0;
  const markers = db.kv.list<Marker>({ prefix: envelopeChecksPrefix() }, {
    limit: options.limit,
  });
  for await (const entry of markers) {
    if (entry.value.markedAt > options.now - options.olderThanMs) continue;
    // Retained records are looked for whatever the setting: it may have changed since.
    await deleteEnvelopeIfLast(db, {
      ...envelopeCheckKeyParts(entry.key),
      chunks: entry.value.chunks,
    }, { retained: true });
    checked++;
  }
  return checked;
}
