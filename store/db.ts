/**
 * The store's handle: the KV, the at-rest sealer, the group committer and reader, and the
 * helpers every store module shares (read-check-commit retries, the health probe).
 *
 * @module
 */
import { isRemoteKvPath } from "../config.ts";
import { type CommitBatcher, createCommitBatcher } from "./batcher.ts";
import { healthKey } from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { createReadBatcher, type ReadBatcher } from "./read_batcher.ts";
import type { Sealer } from "./sealing.ts";

/** What every store function needs: the KV, the at-rest sealer, the group committer and reader. */
export interface Db {
  kv: Deno.Kv;
  sealer: Sealer;
  batcher: CommitBatcher;
  reader: ReadBatcher;
  /** Moves on with every form or destination write through this Db (see form_cache.ts). */
  formVersion: ChangeVersion;
}

/** A counter that writers move on and caches compare, so a cache is never stale after a write. */
export interface ChangeVersion {
  /** The current version. */
  readonly value: number;
  /** Called by a writer after its change. */
  bump(): void;
}

function createChangeVersion(): ChangeVersion {
  let value = 0;
  return {
    get value() {
      return value;
    },
    bump() {
      value++;
    },
  };
}

/** A Db over an open KV; `queues` says whether the KV offers queues for wake-ups. */
export function createDb(kv: Deno.Kv, sealer: Sealer, options = { queues: false }): Db {
  return {
    kv,
    sealer,
    batcher: createCommitBatcher(kv, options),
    reader: createReadBatcher(kv),
    formVersion: createChangeVersion(),
  };
}

/** Opens the KV at `path` (a file, ":memory:", a KV Connect URL; undefined: the platform's) as a Db. */
export async function openDb(
  path: string | undefined,
  sealer: Sealer,
  options: { queues: boolean },
): Promise<Db> {
  if (path !== undefined && path !== ":memory:" && !isRemoteKvPath(path)) {
    await restrictKvFile(path);
  }
  return createDb(await Deno.openKv(path), sealer, options);
}

/**
 * Makes a local KV file readable by its owner only (0600), creating it empty if need
 * be: SQLite gives its `-wal` and `-shm` files the database file's mode, and the
 * process's umask would leave them world-readable (0644). Existing files are tightened.
 */
export async function restrictKvFile(path: string): Promise<void> {
  const file = await Deno.open(path, { create: true, write: true, mode: 0o600 });
  file.close();
  for (const name of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      await Deno.chmod(name, 0o600);
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
}

/** Closes the Db's KV (again is a no-op); a queue listener on it settles afterwards. */
export function closeDb(db: Db): void {
  try {
    db.kv.close();
  } catch (error) {
    // Closed already (a readiness test closes the KV under a running service).
    if (!(error instanceof Deno.errors.BadResource)) throw error;
  }
}

/** Resolves when the KV answers a read; rejects with its error when it does not. */
export async function pingKv(db: Db): Promise<void> {
  await db.kv.get(healthKey());
}

/** Resolves when the KV takes a small write; rejects with its error when it does not. */
export async function probeKvWrite(db: Db): Promise<void> {
  const result = await db.kv.set(healthKey(), Date.now());
  if (!result.ok) throw new Error("KV refused the health write");
}

/** Thrown when an atomic commit keeps losing to concurrent writers. */
class ConflictError extends Error {
  override name = "ConflictError";
}

/**
 * Runs a read-check-commit step until its commit succeeds. The step returns the
 * result to hand back, or an AtomicOperation to commit and a result for success.
 * A commit refused because another process wrote first is tried again (kv_busy.ts).
 */
export async function retryAtomic<T>(
  step: () => Promise<{ op: Deno.AtomicOperation | null; result: T }>,
  attempts = 20,
): Promise<T> {
  for (let i = 0; i < attempts; i++) {
    const { op, result } = await step();
    if (op === null) return result;
    if ((await retryWhileBusy(() => op.commit())).ok) return result;
  }
  throw new ConflictError("Too many concurrent updates: try again");
}
