import { type CommitBatcher, createCommitBatcher } from "./batcher.ts";
import type { Sealer } from "./sealing.ts";

/** What every store function needs: the KV, the at-rest sealer and the group committer. */
export interface Db {
  kv: Deno.Kv;
  sealer: Sealer;
  batcher: CommitBatcher;
}

/** A Db over an open KV; `queues` says whether the KV offers queues for wake-ups. */
export function createDb(kv: Deno.Kv, sealer: Sealer, options = { queues: false }): Db {
  return { kv, sealer, batcher: createCommitBatcher(kv, options) };
}

/** Thrown when an atomic commit keeps losing to concurrent writers. */
class ConflictError extends Error {
  override name = "ConflictError";
}

/**
 * Runs a read-check-commit step until its commit succeeds. The step returns the
 * result to hand back, or an AtomicOperation to commit and a result for success.
 */
export async function retryAtomic<T>(
  step: () => Promise<{ op: Deno.AtomicOperation | null; result: T }>,
  attempts = 20,
): Promise<T> {
  for (let i = 0; i < attempts; i++) {
    const { op, result } = await step();
    if (op === null) return result;
    const commit = await op.commit();
    if (commit.ok) return result;
  }
  throw new ConflictError("Too many concurrent updates: try again");
}
