/**
 * The one test send under way per destination, across every process on the KV: a
 * claim is a key written only where none is (a versionstamp check), released when the
 * test send ends; a claim a killed process left behind lapses after its time.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { testSendUnderWayKey } from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";

/** Claims the destination's test send slot for `ttlMs`; the release, or null when it is taken. */
export async function claimTestSend(
  db: Db,
  destinationId: string,
  options: { ttlMs: number; now?: number },
): Promise<(() => Promise<void>) | null> {
  const now = options.now ?? Date.now();
  const key = testSendUnderWayKey(destinationId);
  const current = await db.kv.get<{ until: number }>(key);
  // KV drops expired keys lazily: a claim past its time is free whatever is still stored.
  if (current.value !== null && current.value.until > now) return null;
  const claimed = await retryWhileBusy(() =>
    db.kv.atomic().check(current).set(key, { until: now + options.ttlMs }, {
      expireIn: options.ttlMs,
    }).commit()
  );
  if (!claimed.ok) return null;
  return async () => {
    await retryWhileBusy(() =>
      db.kv.atomic().check({ key, versionstamp: claimed.versionstamp }).delete(key).commit()
    );
  };
}
