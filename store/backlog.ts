/**
 * The backlog as operators see it (`/metrics`, `/readyz`): unfinished delivery jobs by
 * state and destinations paused for their health. Both are bounded
 * reads, never full scans: at most `limit` entries each, oldest jobs first (the likeliest
 * to be due), with `truncated` saying the bound was reached.
 *
 * @module
 */
import type { Db } from "./db.ts";
import type { DestinationRecord } from "./destinations.ts";
import { decodeJob, type StoredJob } from "./job_record.ts";
import { destinationsPrefix, jobsPrefix } from "./keys.ts";

/** Visits the first `limit` entries under `prefix`; true when more were left unvisited. */
async function visitBounded<T>(
  db: Db,
  prefix: Deno.KvKey,
  limit: number,
  visit: (entry: Deno.KvEntry<T>) => void,
): Promise<boolean> {
  let seen = 0;
  for await (const entry of db.kv.list<T>({ prefix }, { limit: limit + 1, batchSize: 500 })) {
    if (++seen > limit) return true;
    visit(entry);
  }
  return false;
}

/** Unfinished jobs by state, as far as the bounded read went. */
export interface JobCounts {
  /** Pending jobs whose time has come and in-flight jobs whose lease expired (held ones not). */
  due: number;
  /** Leased by a process and not yet expired. */
  inFlight: number;
  /** Pending after at least one failed attempt, waiting for their next one. */
  retrying: number;
  /** Kept back while their destination is paused for its health. */
  held: number;
  /** The read stopped at its bound: the counts are lower bounds. */
  truncated: boolean;
}

/** Counts the oldest `limit` unfinished jobs by state at `now`. */
export async function countJobs(db: Db, options: { now: number; limit: number }) {
  const counts: JobCounts = { due: 0, inFlight: 0, retrying: 0, held: 0, truncated: false };
  counts.truncated = await visitBounded<StoredJob>(db, jobsPrefix(), options.limit, (entry) => {
    const job = decodeJob(entry);
    if (job.state === "held") counts.held++;
    else if (job.dueAt <= options.now) counts.due++;
    else if (job.state === "in_flight") counts.inFlight++;
    else if (job.attempts > 0) counts.retrying++;
  });
  return counts;
}

/** Destinations the service paused for their health, as far as the bounded read went. */
export interface PausedDestinations {
  paused: number;
  truncated: boolean;
}

/** Counts paused destinations among the first `limit` destination records. */
export async function countPausedDestinations(db: Db, options: { limit: number }) {
  const counts: PausedDestinations = { paused: 0, truncated: false };
  const prefix = destinationsPrefix();
  counts.truncated = await visitBounded<DestinationRecord>(db, prefix, options.limit, (entry) => {
    if (entry.value.health.state === "paused") counts.paused++;
  });
  return counts;
}

/** The backlog, read at most once per `cacheMs` however often it is asked for. */
export interface BacklogReader {
  read(): Promise<{ jobs: JobCounts; destinations: PausedDestinations }>;
}

/** Jobs and destination records each read at most, per backlog read. */
export const BACKLOG_READ_LIMIT = 10_000;
/** How long one backlog read answers for (a scrape or probe every few seconds costs one). */
const BACKLOG_CACHE_MS = 5_000;

/** A cached reader over `db`; `limit` bounds each read (at least BACKLOG_READ_LIMIT). */
export function createBacklogReader(
  db: Db,
  options: { limit?: number; cacheMs?: number; now?: () => number } = {},
): BacklogReader {
  const limit = Math.max(options.limit ?? 0, BACKLOG_READ_LIMIT);
  const cacheMs = options.cacheMs ?? BACKLOG_CACHE_MS;
  const now = options.now ?? Date.now;
  let last: { at: number; reading: ReturnType<BacklogReader["read"]> } | null = null;
  return {
    read() {
      const at = now();
      if (last !== null && at - last.at < cacheMs) return last.reading;
      const reading = Promise.all([
        countJobs(db, { now: at, limit }),
        countPausedDestinations(db, { limit }),
      ]).then(([jobs, destinations]) => ({ jobs, destinations }));
      // A failed read is not kept: the next asks again.
      reading.catch(() => {
        if (last?.reading === reading) last = null;
      });
      last = { at, reading };
      return reading;
    },
  };
}
