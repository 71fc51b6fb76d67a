/**
 * Redelivery: releasing held jobs (their destination was paused) and restoring retained
 * failed deliveries (FAILED_RETENTION_HOURS) as new pending jobs, one delivery or all of
 * a destination's since a time. A delivery is named by `<submissionId>.<destinationId>`
 * (the webhook's `webhook-id`); one delivery asked for by name is attempted even while
 * its destination is paused (a probe before resuming it). Held jobs and retained
 * records are found through their by-destination indexes (keys.ts): a call reads its
 * own destination's entries (from `since` on), however many jobs other tenants have.
 * One delivery asked for by name is read by its key, which its submission id gives
 * (submission_id.ts).
 *
 * @module
 */
import type { Db } from "./db.ts";
import {
  envelopeChunkKey,
  jobByDestinationKey,
  jobKey,
  type JobKeyParts,
  jobKeyPartsOfIndexKey,
  jobsByDestinationPrefix,
  retainedByDestinationKey,
  retainedByDestinationPrefix,
  retainedKey,
} from "./keys.ts";
import {
  decodeJob,
  encodeJob,
  JOB_BYTES,
  type JobRecord,
  type JobRef,
  type StoredJob,
} from "./job_record.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { jobKeyPartsOf } from "./submission_id.ts";

/** A delivery's identity in the admin API: `<submissionId>.<destinationId>`. */
export interface DeliveryRef {
  submissionId: string;
  destinationId: string;
}

const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
const DELIVERY_ID = new RegExp(`^(${UUID})\\.(${UUID})$`, "i");

/** Reads a delivery id; null when it is not two UUIDs joined by a dot. */
export function parseDeliveryId(id: string): DeliveryRef | null {
  const match = DELIVERY_ID.exec(id);
  return match === null ? null : { submissionId: match[1], destinationId: match[2] };
}

/** What a redelivery found and did. */
export interface Redelivery {
  /** Jobs made due now: held ones released and retained ones restored. */
  woken: JobRef[];
  /** Jobs found pending or in flight (already being delivered), left as they are. */
  underWay: number;
  /** Retained records whose envelope was gone (expired): removed, nothing to send. */
  expired: number;
}

/** Which deliveries of a form's destination to redeliver: one submission's, or all since a time. */
export interface RedeliverySelection {
  formId: string;
  destinationId: string;
  submissionId?: string;
  /** Epoch ms: deliveries of submissions accepted at or after it. */
  since?: number;
  /** Held jobs only (a resume), or retained failed deliveries too (a redelivery). */
  heldOnly?: boolean;
  now: number;
}

const refOf = (job: JobRecord): JobRef => ({
  submittedAt: job.submittedAt,
  submissionId: job.submissionId,
  destinationId: job.destinationId,
  orgId: job.orgId,
});

/** A record kind with its by-destination index. */
interface Indexed {
  recordKey(ref: JobKeyParts): Deno.KvKey;
  indexPrefix(destinationId: string): Deno.KvKey;
}
const JOBS: Indexed = { recordKey: jobKey, indexPrefix: jobsByDestinationPrefix };
const RETAINED: Indexed = { recordKey: retainedKey, indexPrefix: retainedByDestinationPrefix };

/** `getMany` takes at most this many keys. */
const GET_MANY_MAX = 10;

/** Which of a destination's records a listing reads. */
type JobSelection = Pick<
  RedeliverySelection,
  "formId" | "destinationId" | "submissionId" | "since"
>;

/** The destination's index entries (from `since` on). */
async function indexed(db: Db, kind: Indexed, selection: JobSelection) {
  const { destinationId, since } = selection;
  const prefix = kind.indexPrefix(destinationId);
  const iter = db.kv.list(
    { prefix, ...(since === undefined ? {} : { start: [...prefix, since] }) },
    { batchSize: 500 },
  );
  const refs: JobKeyParts[] = [];
  for await (const entry of iter) refs.push(jobKeyPartsOfIndexKey(entry.key));
  return refs;
}

/** The record keys one delivery asked for by name has: none for an id that holds no time. */
function named(selection: JobSelection & { submissionId: string }): JobKeyParts[] {
  const { submissionId, destinationId } = selection;
  const parts = jobKeyPartsOf({ submissionId, destinationId });
  return parts === null ? [] : [parts];
}

/**
 * The records of the selection, never another destination's: one delivery asked for by
 * name, read by its key (a job joins the index only when it is first put back: jobs.ts),
 * or all of them, found through the destination's index (oldest first, from `since` on).
 */
async function* matching(db: Db, kind: Indexed, selection: JobSelection) {
  const { submissionId } = selection;
  const refs = submissionId === undefined
    ? await indexed(db, kind, selection)
    : named({ ...selection, submissionId });
  for (let i = 0; i < refs.length; i += GET_MANY_MAX) {
    const keys = refs.slice(i, i + GET_MANY_MAX).map(kind.recordKey);
    for (const entry of await db.kv.getMany<StoredJob[]>(keys)) {
      if (entry.value === null) continue;
      const job = decodeJob({ key: entry.key, value: entry.value });
      if (job.formId === selection.formId) yield { entry, job };
    }
  }
}

/**
 * The unfinished jobs of a form's destination that were put back at least once (retrying
 * or held: a job joins its destination's index then), oldest first, with their entries.
 */
export function destinationJobs(
  db: Db,
  selection: { formId: string; destinationId: string },
): AsyncGenerator<{ entry: Deno.KvEntry<StoredJob>; job: JobRecord }> {
  return matching(db, JOBS, selection);
}

/**
 * Makes the selected held jobs due now and restores the selected retained failed
 * deliveries as new pending jobs (attempts counted afresh). Each change is checked
 * against the versionstamp read, so a job that moved on meanwhile is left alone.
 */
export async function redeliver(db: Db, selection: RedeliverySelection): Promise<Redelivery> {
  const result: Redelivery = { woken: [], underWay: 0, expired: 0 };
  const { now } = selection;
  // One delivery asked for by name goes through even while its destination is paused.
  const redelivered = selection.submissionId !== undefined ? true : undefined;

  for await (const { entry, job } of matching(db, JOBS, selection)) {
    if (job.state !== "held") {
      result.underWay++;
      continue;
    }
    const next: JobRecord = { ...job, state: "pending", dueAt: now, updatedAt: now, redelivered };
    const versionstamp = await db.batcher.commit({
      apply: (op) => op.check(entry).set(jobKey(next), encodeJob(next)),
      mutations: 1,
      checks: 1,
      bytes: JOB_BYTES,
      wake: [refOf(next)],
    });
    if (versionstamp !== null) result.woken.push(refOf(next));
  }
  if (selection.heldOnly) return result;

  for await (const { entry, job } of matching(db, RETAINED, selection)) {
    const first = await db.kv.get(envelopeChunkKey(job.submittedAt, job.submissionId, 0));
    if (first.value === null) {
      const op = db.kv.atomic().check(entry).delete(entry.key).delete(
        retainedByDestinationKey(job),
      );
      await retryWhileBusy(() => op.commit());
      result.expired++;
      continue;
    }
    // No family: its siblings finished long ago, so the envelope check runs after it ends.
    const next: JobRecord = {
      ...job,
      state: "pending",
      attempts: 0,
      dueAt: now,
      family: undefined,
      updatedAt: now,
      redelivered,
    };
    const versionstamp = await db.batcher.commit({
      apply: (op) =>
        op.check(entry)
          .check({ key: jobKey(next), versionstamp: null })
          .delete(retainedKey(job))
          .delete(retainedByDestinationKey(job))
          .set(jobKey(next), encodeJob(next))
          .set(jobByDestinationKey(next), 0),
      mutations: 4,
      checks: 2,
      bytes: JOB_BYTES,
      wake: [refOf(next)],
    });
    if (versionstamp !== null) result.woken.push(refOf(next));
  }
  return result;
}
