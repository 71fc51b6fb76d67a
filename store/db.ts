import type { Sealer } from "./sealing.ts";

/** What every store function needs: the KV and the at-rest sealer. */
export interface Db {
  kv: Deno.Kv;
  sealer: Sealer;
}

/** Thrown when an atomic commit keeps losing to concurrent writers. */
export class ConflictError extends Error {
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

/** The current time as an ISO 8601 string (injectable clock for tests). */
export function nowIso(now: () => number = Date.now): string {
  return new Date(now()).toISOString();
}
