/**
 * Commits on a KV file that other processes write too. Deno's SQLite-backed KV runs a
 * commit as a deferred transaction that reads first (its checks and the version
 * counter) and writes after; when another process commits in between, SQLite refuses
 * the write (SQLITE_BUSY_SNAPSHOT, which its busy timeout does not wait out) and the
 * commit rejects with "database is locked", having written nothing. Commits without
 * checks are not affected. Such a commit is simply tried again, after a short random
 * pause that grows, so that two processes stop colliding.
 *
 * Without retrying, deliveries lost their claim or their result this way, and their jobs
 * waited for the sweep (or, when the delivery had been sent, for its lease to expire:
 * sent twice). How often: docs/design.md, "Refused commits are retried; no lock file".
 *
 * @module
 */
import { countKvBusy } from "../metrics.ts";

/** Tries of one commit at most before its error is passed on (about 2 s of pauses). */
const MAX_TRIES = 50;
/** The longest pause between two tries, in ms. */
const MAX_PAUSE_MS = 64;

/** Whether an error is a commit refused because another connection wrote first. */
export function isKvBusy(error: unknown): boolean {
  return error instanceof Error && error.message === "database is locked";
}

/**
 * Runs `commit` (one KV commit, which may be called again) until it does not reject
 * with "database is locked"; other errors, and that one after MAX_TRIES, are passed on.
 */
export async function retryWhileBusy<T>(commit: () => Promise<T>): Promise<T> {
  for (let tries = 1;; tries++) {
    try {
      return await commit();
    } catch (error) {
      if (!isKvBusy(error) || tries >= MAX_TRIES) throw error;
      countKvBusy();
      const pause = Math.random() * Math.min(MAX_PAUSE_MS, 2 ** tries);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}
