/**
 * Notice jobs: one owner notification to one channel, a job kind of the delivery engine
 * (delivery/notice.ts runs them). A job lives at `notify_jobs/<orgId>/<id>` until it is
 * sent or given up, so a restart loses none; beside it a due entry,
 * `notify_due/<dueAt>/<orgId>/<id>`, moves with every claim and retry in the same commit.
 * The sweep lists due entries up to now and stops: a pass reads what is due, never
 * every organization's jobs. Claims take the lease rule of every job kind (jobs.ts
 * `leased`) and commit through the group committer, as deliveries do; several processes
 * share the work through the versionstamp check.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { leased } from "./jobs.ts";
import {
  notifyDueKey,
  notifyDueParts,
  notifyDuePrefix,
  notifyJobKey,
  notifyJobsPrefix,
  notifyLastKey,
  notifyLogKey,
  notifyOutboxDueKey,
  notifyOutboxPrefix,
} from "./keys.ts";
import type { ChannelRef, NotifyJob, NotifyLogEntry, PendingEvent } from "./notifications.ts";
import { JOB_TTL_MS, testEvent } from "./notifications.ts";

/** How long sent notifications are listed. */
const LOG_TTL_MS = 7 * 24 * 3600 * 1000;
/** Rough bytes of a notice job, for commit batching. */
const NOTICE_BYTES = 2000;

/** A notice job's identity as the sweep finds it, and its channel (its lane in the dispatcher). */
export interface NoticeRef {
  orgId: string;
  id: string;
  channel: string;
}

/** A notice job claimed by this worker: the record and the versionstamp that proves the lease. */
export interface ClaimedNotice {
  job: NotifyJob;
  versionstamp: string;
}

/** A channel as one string: `email`, `webhook` or `chat:<destinationId>`. */
export function channelKey(channel: ChannelRef): string {
  return channel.kind === "chat" ? `chat:${channel.destinationId}` : channel.kind;
}

/** The operations that store a new job and its due entry. */
function addJob(op: Deno.AtomicOperation, job: NotifyJob) {
  op.set(notifyJobKey(job.orgId, job.id), job, { expireIn: JOB_TTL_MS })
    .set(notifyDueKey(job.dueAt, job.orgId, job.id), channelKey(job.channel), {
      expireIn: JOB_TTL_MS,
    });
}

/** New jobs of an event, one per channel, due now. */
function jobsOf(event: PendingEvent, channels: ChannelRef[], now: number): NotifyJob[] {
  return channels.map((channel) => ({
    id: crypto.randomUUID(),
    orgId: event.orgId,
    channel,
    event,
    attempts: 0,
    dueAt: now,
    createdAt: now,
  }));
}

/** A job's ref. */
function refOf(job: NotifyJob): NoticeRef {
  return { orgId: job.orgId, id: job.id, channel: channelKey(job.channel) };
}

/**
 * Turns an outbox entry into one job per channel in one commit, and remembers when it
 * was told; null when another process did it first, else the jobs' refs.
 */
export async function dispatchEvent(
  db: Db,
  entry: Deno.KvEntry<PendingEvent>,
  options: { channels: ChannelRef[]; now: number; groupMs: number },
): Promise<NoticeRef[] | null> {
  const { value: event } = entry;
  const jobs = jobsOf(event, options.channels, options.now);
  const versionstamp = await db.batcher.commit({
    apply(op) {
      op.check(entry).delete(entry.key)
        .delete(notifyOutboxDueKey(event.dueAt, event.orgId, event.type, event.subject))
        .set(notifyLastKey(event.orgId, event.type, event.subject), options.now, {
          expireIn: options.groupMs,
        });
      for (const job of jobs) addJob(op, job);
    },
    mutations: 3 + 2 * jobs.length,
    checks: 1,
    bytes: NOTICE_BYTES * (1 + jobs.length),
  });
  return versionstamp === null ? null : jobs.map(refOf);
}

/** Deletes a waiting event and its due entry without a trace: its organization is gone. */
export async function dropEvent(db: Db, entry: Deno.KvEntry<PendingEvent>): Promise<void> {
  const { value: event } = entry;
  await db.batcher.commit({
    apply(op) {
      op.check(entry).delete(entry.key)
        .delete(notifyOutboxDueKey(event.dueAt, event.orgId, event.type, event.subject));
    },
    mutations: 2,
    checks: 1,
    bytes: NOTICE_BYTES,
  });
}

/** Queues a test notification to each channel now; returns the jobs' refs. */
export async function queueTest(
  db: Db,
  options: { orgId: string; channels: ChannelRef[]; now: number },
): Promise<NoticeRef[]> {
  const jobs = jobsOf(testEvent(options.orgId, options.now), options.channels, options.now);
  const versionstamp = await db.batcher.commit({
    apply(op) {
      for (const job of jobs) addJob(op, job);
    },
    mutations: 2 * jobs.length,
    bytes: NOTICE_BYTES * jobs.length,
  });
  if (versionstamp === null) throw new Error("Cannot queue a test notification: KV commit failed");
  return jobs.map(refOf);
}

/** Notice jobs due by `now` (pending ones and ended leases), soonest first, at most `limit`. */
export async function listDueNotices(
  db: Db,
  options: { now: number; limit: number },
): Promise<NoticeRef[]> {
  const refs: NoticeRef[] = [];
  const iter = db.kv.list<string>({
    start: notifyDuePrefix(),
    end: [...notifyDuePrefix(), options.now + 1],
  }, { limit: options.limit });
  for await (const entry of iter) {
    const { orgId, id } = notifyDueParts(entry.key);
    refs.push({ orgId, id, channel: entry.value });
  }
  return refs;
}

/**
 * Claims a due notice job for `leaseMs` (an attempt counted; jobs.ts `leased`); null when
 * it is gone, not due, or another worker won.
 */
export async function claimNotice(
  db: Db,
  ref: Pick<NoticeRef, "orgId" | "id">,
  options: { now: number; leaseMs: number },
): Promise<ClaimedNotice | null> {
  const key = notifyJobKey(ref.orgId, ref.id);
  const [entry] = await db.reader.getMany<[NotifyJob]>([key]);
  if (entry.value === null || entry.versionstamp === null) return null;
  if (entry.value.dueAt > options.now) return null;
  const job = leased(entry.value, options);
  const versionstamp = await db.batcher.commit({
    apply(op) {
      op.check({ key, versionstamp: entry.versionstamp });
      moveDue(op, entry.value as NotifyJob, job);
      op.set(key, job, { expireIn: JOB_TTL_MS });
    },
    mutations: 3,
    checks: 1,
    bytes: NOTICE_BYTES,
  });
  return versionstamp === null ? null : { job, versionstamp };
}

/** Moves a job's due entry from its old time to its new one. */
function moveDue(op: Deno.AtomicOperation, before: NotifyJob, after: NotifyJob) {
  op.delete(notifyDueKey(before.dueAt, before.orgId, before.id))
    .set(notifyDueKey(after.dueAt, after.orgId, after.id), channelKey(after.channel), {
      expireIn: JOB_TTL_MS,
    });
}

/** Ends a claimed job and logs what came of it. */
export async function finishNotice(
  db: Db,
  claimed: ClaimedNotice,
  outcome: { delivered: boolean; error: string | null; now: number },
): Promise<void> {
  const { job } = claimed;
  const log: NotifyLogEntry = {
    id: job.id,
    at: new Date(outcome.now).toISOString(),
    type: job.event.type,
    channel: job.channel,
    subject: job.event.subject,
    count: job.event.count,
    delivered: outcome.delivered,
    attempts: job.attempts,
    error: outcome.error,
  };
  const key = notifyJobKey(job.orgId, job.id);
  await db.batcher.commit({
    apply(op) {
      op.check({ key, versionstamp: claimed.versionstamp }).delete(key)
        .delete(notifyDueKey(job.dueAt, job.orgId, job.id))
        .set(notifyLogKey(job.orgId, outcome.now, job.id), log, { expireIn: LOG_TTL_MS });
    },
    mutations: 3,
    checks: 1,
    bytes: NOTICE_BYTES,
  });
}

/** Deletes a claimed job and its due entry without a trace: its organization is gone. */
export async function dropNotice(db: Db, claimed: ClaimedNotice): Promise<void> {
  const { job } = claimed;
  const key = notifyJobKey(job.orgId, job.id);
  await db.batcher.commit({
    apply(op) {
      op.check({ key, versionstamp: claimed.versionstamp }).delete(key)
        .delete(notifyDueKey(job.dueAt, job.orgId, job.id));
    },
    mutations: 2,
    checks: 1,
    bytes: NOTICE_BYTES,
  });
}

/** Puts a claimed job back, due at `dueAt` (its attempt kept counted unless `uncounted`). */
export async function retryNotice(
  db: Db,
  claimed: ClaimedNotice,
  options: { dueAt: number; uncounted?: boolean },
): Promise<void> {
  const { job } = claimed;
  const next = {
    ...job,
    attempts: job.attempts - (options.uncounted ? 1 : 0),
    dueAt: options.dueAt,
  };
  const key = notifyJobKey(job.orgId, job.id);
  await db.batcher.commit({
    apply(op) {
      op.check({ key, versionstamp: claimed.versionstamp });
      moveDue(op, job, next);
      op.set(key, next, { expireIn: JOB_TTL_MS });
    },
    mutations: 3,
    checks: 1,
    bytes: NOTICE_BYTES,
  });
}

/**
 * Every key of an organization's waiting notifications: its notice jobs and outbox
 * groups, and their due entries (time first, so found through the records' due times
 * rather than by a listing of everyone's). For deleting an organization.
 */
export async function orgNoticeKeys(db: Db, orgId: string): Promise<Deno.KvKey[]> {
  const keys: Deno.KvKey[] = [];
  for await (const entry of db.kv.list<NotifyJob>({ prefix: notifyJobsPrefix(orgId) })) {
    keys.push(entry.key, notifyDueKey(entry.value.dueAt, orgId, entry.value.id));
  }
  for await (
    const entry of db.kv.list<PendingEvent>({ prefix: [...notifyOutboxPrefix(), orgId] })
  ) {
    const { dueAt, type, subject } = entry.value;
    keys.push(entry.key, notifyOutboxDueKey(dueAt, orgId, type, subject));
  }
  return keys;
}
