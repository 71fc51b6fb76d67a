/**
 * The paces processes keep to the destinations they deliver to, exchanged through KV so
 * that processes sharing a KV pace each receiver together (delivery/pace.ts merges them).
 * Each live process writes one record a sync (in chunks past SHARES_PER_CHUNK
 * destinations) and lists everyone's: a few mutations a second in all, whatever the
 * number of deliveries. Records carry their time and expire soon after; a reader skips
 * those older than `freshMs`.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { paceSharesKey, paceSharesPrefix, processIdOfPaceSharesKey } from "./keys.ts";

/** What one process keeps to one destination, as the others see it. */
export interface PaceShare {
  /** Deliveries in flight it allows itself. */
  limit: number;
  /** Epoch ms until which it holds the destination (a Retry-After, a quota), 0: none. */
  heldUntil: number;
  /** Epoch ms of its last cut for congestion (a time-out, a 5xx, a refusal), 0: none. */
  congestedAt: number;
  /** Starts a second it keeps to since a refusal for rate, or null. */
  rate: number | null;
}

/** One chunk as stored: when it was written and the shares, by destination id. */
interface StoredShares {
  at: number;
  shares: [string, number, number, number, number | null][];
}

/** Destinations per record: about 80 bytes each, well under KV's 64 KiB value limit. */
const SHARES_PER_CHUNK = 400;

/** Exchanges one process's shares with every other process's. */
export interface PaceShareExchange {
  /**
   * Writes `mine` (none: nothing written) and returns the other live processes' shares
   * by destination id.
   */
  exchange(mine: Map<string, PaceShare>): Promise<Map<string, PaceShare[]>>;
  /** Removes this process's record (on shutdown). */
  withdraw(): Promise<void>;
}

/** The exchange of process `processId`; records live `freshMs` (and expire after twice that). */
export function createPaceShareExchange(
  db: Db,
  options: { processId: string; freshMs: number; now?: () => number },
): PaceShareExchange {
  const { processId, freshMs } = options;
  const now = options.now ?? Date.now;
  /** Chunks written last time, so that fewer this time delete the rest. */
  let written = 0;

  async function write(mine: Map<string, PaceShare>) {
    const rows = [...mine].map(([id, s]): StoredShares["shares"][number] => [
      id,
      s.limit,
      s.heldUntil,
      s.congestedAt,
      s.rate,
    ]);
    const chunks = Math.ceil(rows.length / SHARES_PER_CHUNK);
    const at = now();
    const op = db.kv.atomic();
    for (let i = 0; i < chunks; i++) {
      const shares = rows.slice(i * SHARES_PER_CHUNK, (i + 1) * SHARES_PER_CHUNK);
      op.set(paceSharesKey(processId, i), { at, shares } satisfies StoredShares, {
        expireIn: 2 * freshMs,
      });
    }
    for (let i = chunks; i < written; i++) op.delete(paceSharesKey(processId, i));
    const result = await retryWhileBusy(() => op.commit());
    if (!result.ok) throw new Error("Cannot write the pace shares: commit refused");
    written = chunks;
  }

  return {
    async exchange(mine) {
      if (mine.size > 0 || written > 0) await write(mine);
      const others = new Map<string, PaceShare[]>();
      const fresh = now() - freshMs;
      for await (const entry of db.kv.list<StoredShares>({ prefix: paceSharesPrefix() })) {
        if (processIdOfPaceSharesKey(entry.key) === processId || entry.value.at < fresh) continue;
        for (const [id, limit, heldUntil, congestedAt, rate] of entry.value.shares) {
          const list = others.get(id) ?? [];
          list.push({ limit, heldUntil, congestedAt, rate });
          others.set(id, list);
        }
      }
      return others;
    },
    async withdraw() {
      if (written === 0) return;
      const op = db.kv.atomic();
      for (let i = 0; i < written; i++) op.delete(paceSharesKey(processId, i));
      await retryWhileBusy(() => op.commit());
      written = 0;
    },
  };
}

/** How recent a pace record must be for its process to count as live. */
const LIVE_MS = 10_000;

/**
 * How many processes share the KV, as far as their pace records tell (a process records
 * its paces while it delivers, as every accepting process soon does): one listing.
 */
export async function countLiveProcesses(db: Db, now = Date.now()): Promise<number> {
  const live = new Set<string>();
  for await (const entry of db.kv.list<StoredShares>({ prefix: paceSharesPrefix() })) {
    if (entry.value.at >= now - LIVE_MS) live.add(processIdOfPaceSharesKey(entry.key));
  }
  return live.size;
}
