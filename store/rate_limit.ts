/**
 * A fixed-window limit of submissions per form and client.
 *
 * A slot is reserved when a request is admitted, before its body is read, and either
 * counted (the submission was accepted, or its captcha failed) or released, so
 * concurrent requests from one client can never pass the limit in one process.
 *
 * Counting is in memory. KV is consulted only for clients that come near the limit:
 * once a client's count reaches half of it, the process reads the counter stored for
 * that form, client and window (by another process, or before a restart), adds it to
 * its own, and stores the sum with each further submission. One-off visitors, the
 * great majority, cost no KV read or write. So the limit is exact in one process and
 * across a restart; processes sharing a KV see each other's counts only when they
 * read them, so there a client may get more (at most the limit per process). The client appears in KV only as a keyed hash
 * (Sealer.pseudonym), never as an address; counters expire after their window.
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
  /** The stored counter has been read (once the client came near the limit). */
  loaded: boolean;
  loading: Promise<void> | null;
}

const UNLIMITED: RateSlot = { count() {}, release() {} };

/** A limiter of `max` per `windowMs` (0: no limit). */
export function createRateLimiter(
  db: Db,
  options: { max: number; windowMs: number; now?: () => number },
): RateLimiter {
  const now = options.now ?? Date.now;
  /** From this count on, a client's counter is read from and written to KV. */
  const nearLimit = Math.ceil(options.max / 2);
  const counters = new Map<string, Counter>();

  /** Drops counters of ended windows and of idle one-off clients, then any idle ones. */
  function forget(window: number) {
    for (const [key, c] of counters) {
      if (c.window !== window || (c.reserved === 0 && c.counted <= 1)) counters.delete(key);
    }
    if (counters.size < MAX_TRACKED / 2) return;
    for (const [key, c] of counters) if (c.reserved === 0) counters.delete(key);
  }

  function counterOf(formId: string, clientKey: string, window: number): Counter {
    const mapKey = `${formId}|${clientKey}`;
    let counter = counters.get(mapKey);
    if (counter?.window !== window) {
      if (counters.size >= MAX_TRACKED) forget(window);
      counter = { window, counted: 0, reserved: 0, loaded: false, loading: null };
      counters.set(mapKey, counter);
    }
    return counter;
  }

  /** Reads the stored counter once; concurrent requests of the client share the read. */
  function load(counter: Counter, formId: string, clientKey: string): Promise<void> {
    counter.loading ??= (async () => {
      const key = rateKey(formId, db.sealer.pseudonym(clientKey), counter.window);
      const stored = await db.kv.get<number>(key);
      // What is stored was counted elsewhere (another process, or before a restart):
      // this process writes its own count only from now on.
      counter.counted += stored.value ?? 0;
      counter.loaded = true;
    })();
    return counter.loading;
  }

  return {
    async reserve(formId, clientKey) {
      if (options.max === 0) return UNLIMITED;
      const window = Math.floor(now() / options.windowMs);
      const counter = counterOf(formId, clientKey, window);
      if (!counter.loaded && counter.counted + counter.reserved + 1 >= nearLimit) {
        await load(counter, formId, clientKey);
      }
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
          if (count < nearLimit) return;
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
