/**
 * A fixed-window limit of submissions per form and client.
 *
 * A slot is reserved when a request is admitted, before its body is read, and either
 * counted (the submission was accepted, or its captcha failed) or released, so
 * concurrent requests from one client can never pass the limit in one process. Counts
 * live in KV (one counter per form, client and window, expiring after the window) so
 * that a restarted process, or another one sharing the KV, starts from them; the
 * client appears there only as a keyed hash (Sealer.pseudonym), never as an address.
 * Each process reads a counter once per window and counts on in memory: exact in one
 * process, approximate across several (each adds to what it read).
 *
 * @module
 */
import type { Db } from "./db.ts";
import { rateKey } from "./keys.ts";

/** A reserved slot: count it or release it, once. */
export interface RateSlot {
  /** The request used its slot (accepted, or a failed captcha). */
  count(): void;
  /** The request ended without using it. */
  release(): void;
}

/** The limit per form and client. */
export interface RateLimiter {
  /**
   * Reserves a slot for a request of `clientKey` to `formId`; when the window's slots
   * are taken, the seconds until it ends instead.
   */
  reserve(formId: string, clientKey: string): Promise<RateSlot | { retryAfter: number }>;
}

/** Counters kept in memory before those of ended windows and idle clients are dropped. */
const MAX_TRACKED = 50_000;

interface Counter {
  window: number;
  counted: number;
  reserved: number;
}

const UNLIMITED: RateSlot = { count() {}, release() {} };

/** A limiter of `max` per `windowMs` (0: no limit). */
export function createRateLimiter(
  db: Db,
  options: { max: number; windowMs: number; now?: () => number },
): RateLimiter {
  const now = options.now ?? Date.now;
  const counters = new Map<string, Counter>();
  /** First reads of a window's counter under way, so concurrent requests share one. */
  const loading = new Map<string, Promise<Counter>>();

  function forget() {
    const current = Math.floor(now() / options.windowMs);
    for (const [key, counter] of counters) {
      if (counter.window !== current || counter.reserved === 0) counters.delete(key);
    }
  }

  async function counterOf(formId: string, clientKey: string): Promise<Counter> {
    const window = Math.floor(now() / options.windowMs);
    const mapKey = `${formId}|${clientKey}`;
    const counter = counters.get(mapKey);
    if (counter?.window === window) return counter;
    const pending = loading.get(mapKey);
    if (pending) return await pending;
    const load = (async () => {
      const client = db.sealer.pseudonym(clientKey);
      const stored = await db.kv.get<number>(rateKey(formId, client, window));
      if (counters.size >= MAX_TRACKED) forget();
      const fresh = { window, counted: stored.value ?? 0, reserved: 0 };
      counters.set(mapKey, fresh);
      return fresh;
    })();
    loading.set(mapKey, load);
    try {
      return await load;
    } finally {
      loading.delete(mapKey);
    }
  }

  return {
    async reserve(formId, clientKey) {
      if (options.max === 0) return UNLIMITED;
      const counter = await counterOf(formId, clientKey);
      if (counter.counted + counter.reserved >= options.max) {
        const end = (counter.window + 1) * options.windowMs;
        return { retryAfter: Math.max(1, Math.ceil((end - now()) / 1000)) };
      }
      counter.reserved++;
      let settled = false;
      return {
        count() {
          if (settled) return;
          settled = true;
          counter.reserved--;
          const count = ++counter.counted;
          const key = rateKey(formId, db.sealer.pseudonym(clientKey), counter.window);
          db.batcher.commit({
            apply: (op) => op.set(key, count, { expireIn: options.windowMs * 2 }),
            mutations: 1,
          }).catch(() => {/* a lost count only loosens the limit */});
        },
        release() {
          if (settled) return;
          settled = true;
          counter.reserved--;
        },
      };
    },
  };
}
