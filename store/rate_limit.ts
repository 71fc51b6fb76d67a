import type { Db } from "./db.ts";

/** A fixed-window limit of accepted submissions per form and client IP. */
export interface RateLimiter {
  /** Seconds until the window ends when the limit is reached, else null. */
  check(formId: string, ip: string | null): Promise<number | null>;
  /** Counts one accepted submission. */
  hit(formId: string, ip: string | null): void;
}

const rateKey = (formId: string, ip: string, window: number): ["rate", string, string, number] => [
  "rate",
  formId,
  ip,
  window,
];

const MAX_TRACKED = 50_000;

/**
 * Counts live in KV (one counter per form, IP and window, expiring after the window),
 * so a restarted process or another one sharing the KV starts from them. Each process
 * reads a counter once per window and counts on in memory, writing its count back
 * with each hit, so the limit costs no KV read per request. Across processes the
 * count is approximate (each adds to what it read); in one process it is exact.
 */
export function createRateLimiter(
  db: Db,
  options: { max: number; windowMs: number; now?: () => number },
): RateLimiter {
  const now = options.now ?? Date.now;
  const counts = new Map<string, { window: number; count: number }>();

  function windowOf(time: number) {
    return Math.floor(time / options.windowMs);
  }

  return {
    async check(formId, ip) {
      if (options.max === 0) return null;
      const window = windowOf(now());
      const mapKey = `${formId}|${ip ?? ""}`;
      let entry = counts.get(mapKey);
      if (entry?.window !== window) {
        const stored = await db.kv.get<number>(rateKey(formId, ip ?? "", window));
        if (counts.size >= MAX_TRACKED) counts.clear();
        entry = { window, count: stored.value ?? 0 };
        counts.set(mapKey, entry);
      }
      if (entry.count < options.max) return null;
      return Math.max(1, Math.ceil(((window + 1) * options.windowMs - now()) / 1000));
    },
    hit(formId, ip) {
      if (options.max === 0) return;
      const window = windowOf(now());
      const mapKey = `${formId}|${ip ?? ""}`;
      const entry = counts.get(mapKey)?.window === window
        ? counts.get(mapKey)!
        : { window, count: 0 };
      entry.count++;
      counts.set(mapKey, entry);
      const count = entry.count;
      db.batcher.commit({
        apply: (op) =>
          op.set(rateKey(formId, ip ?? "", window), count, { expireIn: options.windowMs * 2 }),
        mutations: 1,
      }).catch(() => {/* a lost count only loosens the limit */});
    },
  };
}
