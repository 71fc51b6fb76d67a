/**
 * Group commit for every write of the hot paths (accepting submissions, claiming and
 * finishing delivery jobs). A file-backed KV pays a sync per commit, and SQLite runs
 * one writer at a time, so commits that arrive while one is running are merged into
 * the next, within KV's limits. When a merged commit fails (a check lost a race, or
 * an error), its parts are committed one by one so each gets its own answer.
 *
 * A merged commit evaluates every check against the state before it, so parts must
 * not check keys that other parts write; the job operations only check their own job.
 */

import { type JobRef, MAX_WAKE_REFS, wakeMessage } from "./jobs.ts";

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
}

/** Commits parts, merged where it can. */
export interface CommitBatcher {
  /** The commit's versionstamp, or null when one of the part's checks failed. Rejects on a KV error. */
  commit(part: BatchPart): Promise<string | null>;
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

/** Adds the parts to an operation, with their wake-ups coalesced into few queue messages. */
function applyParts(op: Deno.AtomicOperation, parts: BatchPart[], queues: boolean) {
  const wake: JobRef[] = [];
  for (const part of parts) {
    part.apply(op);
    if (queues && part.wake) wake.push(...part.wake);
  }
  for (let i = 0; i < wake.length; i += MAX_WAKE_REFS) {
    op.enqueue(wakeMessage(wake.slice(i, i + MAX_WAKE_REFS)));
  }
}

/** A batcher over one KV; `queues` says whether it can carry wake-ups. */
export function createCommitBatcher(kv: Deno.Kv, options: { queues: boolean }): CommitBatcher {
  const queue: Waiting[] = [];
  let draining = false;

  async function commitAlone(waiting: Waiting) {
    try {
      const op = kv.atomic();
      applyParts(op, [waiting.part], options.queues);
      const result = await op.commit();
      waiting.resolve(result.ok ? result.versionstamp : null);
    } catch (error) {
      waiting.reject(error);
    }
  }

  /** The oldest parts that fit in one commit. */
  function takeBatch(): Waiting[] {
    const batch: Waiting[] = [];
    let items = 0;
    let checks = 0;
    let bytes = 0;
    while (queue.length > 0) {
      const { part } = queue[0];
      const size = part.mutations + (part.checks ?? 0) + (part.wake ? 1 : 0);
      const fits = items + size <= MAX_MUTATIONS_AND_CHECKS &&
        checks + (part.checks ?? 0) <= MAX_CHECKS &&
        bytes + (part.bytes ?? 0) <= MAX_BYTES;
      if (batch.length > 0 && !fits) break;
      batch.push(queue.shift()!);
      items += size;
      checks += part.checks ?? 0;
      bytes += part.bytes ?? 0;
    }
    return batch;
  }

  async function drain() {
    draining = true;
    while (queue.length > 0) {
      const batch = takeBatch();
      if (batch.length === 1) {
        await commitAlone(batch[0]);
        continue;
      }
      let versionstamp: string | null = null;
      try {
        const op = kv.atomic();
        applyParts(op, batch.map((w) => w.part), options.queues);
        const result = await op.commit();
        if (result.ok) versionstamp = result.versionstamp;
      } catch {
        // Retried one by one below, where the error reaches its own caller.
      }
      if (versionstamp !== null) {
        for (const waiting of batch) waiting.resolve(versionstamp);
      } else {
        for (const waiting of batch) await commitAlone(waiting);
      }
    }
    draining = false;
  }

  return {
    commit(part) {
      return new Promise((resolve, reject) => {
        queue.push({ part, resolve, reject });
        if (!draining) drain();
      });
    },
  };
}
