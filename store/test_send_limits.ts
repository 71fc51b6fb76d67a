/**
 * Test sends' limits for the whole deployment: a token bucket per organization and
 * scope (all its test sends, one destination's, its notification tests) kept in KV and
 * taken with a versionstamp check, so every process sharing the KV spends the same
 * buckets and N processes allow one limit, not N. A bucket holds `capacity` sends and
 * refills continuously, `capacity` per minute, as the in-memory budgets do
 * (delivery/token_buckets.ts); test sends are rare enough for a KV commit each.
 *
 * @module
 */
import { type Db, retryAtomic } from "./db.ts";
import { testSendBucketKey } from "./keys.ts";

/** The window a bucket's capacity refills over. */
export const TEST_SEND_WINDOW_MS = 60_000;

/** One bucket a test send takes from; a capacity of 0 never refuses. */
export interface TestSendBucket {
  scope: string;
  capacity: number;
}

/** Granted, or refused for this long. */
export type TestSendTaken = { ok: true } | { ok: false; retryAfterMs: number };

interface Stored {
  /** Sends taken and not yet refilled. */
  used: number;
  at: number;
}

/**
 * Takes one send from every bucket, or none: granted, or the milliseconds until every
 * bucket has room again.
 */
export async function takeTestSend(
  db: Db,
  orgId: string,
  buckets: TestSendBucket[],
  now: number,
): Promise<TestSendTaken> {
  const limited = buckets.filter((bucket) => bucket.capacity > 0);
  if (limited.length === 0) return { ok: true };
  return await retryAtomic<TestSendTaken>(async () => {
    const keys = limited.map((bucket) => testSendBucketKey(orgId, bucket.scope));
    const entries = await db.kv.getMany<Stored[]>(keys);
    const op = db.kv.atomic();
    let waitMs = 0;
    for (const [i, { capacity }] of limited.entries()) {
      const entry = entries[i];
      const perMs = capacity / TEST_SEND_WINDOW_MS;
      const refilled = entry.value === null
        ? 0
        : Math.max(0, entry.value.used - (now - entry.value.at) * perMs);
      if (refilled + 1 > capacity) {
        waitMs = Math.max(waitMs, Math.ceil((refilled + 1 - capacity) / perMs));
      }
      op.check(entry).set(keys[i], { used: refilled + 1, at: now } satisfies Stored, {
        expireIn: TEST_SEND_WINDOW_MS,
      });
    }
    if (waitMs > 0) return { op: null, result: { ok: false, retryAfterMs: waitMs } };
    return { op, result: { ok: true } };
  });
}
