/**
 * Group commit for every write of the hot paths (accepting submissions, claiming and
 * finishing delivery jobs). A file-backed KV pays a sync per commit, and SQLite runs
 * one writer at a time, so commits that arrive while one is running are merged into
 * the next, within KV's limits; that next operation is built as they arrive. When a
 * merged commit fails (a check lost a race, or an error), its parts are committed one
 * by one so each gets its own answer.
 *
 * A merged commit evaluates every check against the state before it, so parts must
 * not check keys that other parts write, unless that is still right: the job
 * operations check their own job, and a finishing job may check a sibling that
 * this process holds unfinished (envelope_cleanup.ts: if the sibling ends in the same
 * commit, it ends with a check of its own that sees both gone).
 * A commit refused because another process sharing the KV file wrote first is tried
 * again as it is (kv_busy.ts).
 */

import Denque from "denque";
import { timedCommit } from "../metrics.ts";
import type { JobRef } from "./job_record.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { MAX_WAKE_REFS, wakeMessage } from "./wake.ts";

/** One caller's share of a commit. */
export interface BatchPart {
  /** Adds this part's checks, mutations and enqueues to the operation. */
  apply(op: Deno.AtomicOperation): void;
  /** Mutations and enqueues the part adds. */
  mutations: number;
  checks?: number;
  /** Approximate bytes of values and keys. */
  bytes?: number;
  /** Jobs to wake through the KV queue: one message carries the wake-ups of a whole commit. */
  wake?: JobRef[];
  /**
   * This process wakes the `wake` jobs itself once the commit is done: their message is
   * marked as this batcher's, and every process's queue listener passes it over (due_jobs.ts).
   */
  wokenHere?: boolean;
}

/** Commits parts, merged where it can. */
export interface CommitBatcher {
  /** The commit's versionstamp, or null when one of the part's checks failed. Rejects on a KV error. */
  commit(part: BatchPart): Promise<string | null>;
  /** What marks this batcher's wake-up messages for jobs its process woke itself. */
  sender: string;
}

// KV's atomic limits: 1000 mutations, 100 checks, 800 KiB in all and 80 KiB of keys.
// Job and outcome keys run to about 130 bytes, so 450 mutations and checks together
// keep the keys under their limit; the rest stay clear of theirs.
const MAX_MUTATIONS_AND_CHECKS = 450;
const MAX_CHECKS = 90;
const MAX_BYTES = 640 * 1024;

interface Waiting {
  part: BatchPart;
  resolve(versionstamp: string | null): void;
  reject(error: unknown): void;
}

/**
 * Adds the wake-ups of a commit's parts to it, coalesced into few queue messages;
 * `sender` marks those of jobs the process woke itself.
 */
function enqueueWakes(op: Deno.AtomicOperation, wake: JobRef[], sender?: string) {
  for (let i = 0; i < wake.length; i += MAX_WAKE_REFS) {
    op.enqueue(wakeMessage(wake.slice(i, i + MAX_WAKE_REFS), sender));
  }
}

/** A commit being put together: its operation, built as its parts arrive. */
interface OpenBatch {
  op: Deno.AtomicOperation;
  waiting: Waiting[];
  /** A part threw half-way through adding itself: the operation cannot be committed as it is. */
  spoilt: boolean;
  wake: JobRef[];
  /** Wake-ups of jobs this process woke itself. */
  wokenHere: JobRef[];
  items: number;
  checks: number;
  bytes: number;
}

/** A batcher over one KV; `queues` says whether it can carry wake-ups. */
export function createCommitBatcher(kv: Deno.Kv, options: { queues: boolean }): CommitBatcher {
  const sender = crypto.randomUUID();
  /** Parts that did not fit in the open batch, oldest first. */
  // A deque: a flood of parts can overflow by tens of thousands, and Array#shift copies.
  const overflow = new Denque<Waiting>();
  let open: OpenBatch | null = null;
  let draining = false;

  async function commitAlone(waiting: Waiting) {
    try {
      const op = kv.atomic();
      waiting.part.apply(op);
      const { wake, wokenHere } = waiting.part;
      if (options.queues && wake) enqueueWakes(op, wake, wokenHere ? sender : undefined);
      const result = await retryWhileBusy(() => op.commit());
      waiting.resolve(result.ok ? result.versionstamp : null);
    } catch (error) {
      waiting.reject(error);
    }
  }

  /**
   * Adds a part to the open batch when it fits (a batch always takes its first part);
   * false when it does not. The part's mutations go into the operation at once, so a
   * batch is ready to commit the moment the commit before it ends, instead of being
   * built then while KV's SQLite thread waits.
   */
  function addToOpen(waiting: Waiting): boolean {
    const { part } = waiting;
    const size = part.mutations + (part.checks ?? 0) + (part.wake ? 1 : 0);
    if (open === null) {
      open = {
        op: kv.atomic(),
        waiting: [],
        spoilt: false,
        wake: [],
        wokenHere: [],
        items: 0,
        checks: 0,
        bytes: 0,
      };
    } else {
      const fits = open.items + size <= MAX_MUTATIONS_AND_CHECKS &&
        open.checks + (part.checks ?? 0) <= MAX_CHECKS &&
        open.bytes + (part.bytes ?? 0) <= MAX_BYTES;
      if (!fits) return false;
    }
    try {
      part.apply(open.op);
    } catch (error) {
      open.spoilt = true;
      waiting.reject(error);
      return true;
    }
    open.waiting.push(waiting);
    if (options.queues && part.wake) {
      (part.wokenHere ? open.wokenHere : open.wake).push(...part.wake);
    }
    open.items += size;
    open.checks += part.checks ?? 0;
    open.bytes += part.bytes ?? 0;
    return true;
  }

  /** Takes the open batch for committing, and opens the next with the parts that overflowed. */
  function takeOpen(): OpenBatch {
    const batch = open!;
    open = null;
    while (overflow.length > 0 && addToOpen(overflow.peekFront()!)) overflow.shift();
    return batch;
  }

  async function drain() {
    draining = true;
    while (open !== null) {
      const batch = takeOpen();
      enqueueWakes(batch.op, batch.wake);
      enqueueWakes(batch.op, batch.wokenHere, sender);
      let versionstamp: string | null = null;
      let failure: unknown = null;
      try {
        if (batch.spoilt) throw new Error("A part of the batch could not be added");
        const result = await retryWhileBusy(() => timedCommit(batch.op, batch.waiting.length));
        if (result.ok) versionstamp = result.versionstamp;
      } catch (error) {
        failure = error;
      }
      if (versionstamp !== null) {
        for (const waiting of batch.waiting) waiting.resolve(versionstamp);
      } else if (batch.waiting.length === 1 && !batch.spoilt) {
        // Alone, the part's own answer: its check failed, or the error is its own.
        const [waiting] = batch.waiting;
        if (failure === null) waiting.resolve(null);
        else waiting.reject(failure);
      } else {
        // Merged parts (or those beside a spoilt one) are committed one by one, so each
        // gets its own answer.
        for (const waiting of batch.waiting) await commitAlone(waiting);
      }
    }
    draining = false;
  }

  return {
    sender,
    commit(part) {
      return new Promise((resolve, reject) => {
        const waiting = { part, resolve, reject };
        if (overflow.length > 0 || !addToOpen(waiting)) overflow.push(waiting);
        if (!draining) drain();
      });
    },
  };
}
