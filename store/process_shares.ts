/**
 * What each live process shares with the others on its KV, so that together they pace
 * each receiver and spend each budget as one: the paces it keeps to the destinations it
 * delivers to (delivery/pace.ts merges them) and what it took from the budgets that
 * protect third parties lately (delivery/outbound_budget.ts charges it to its own).
 * Each process writes one record an exchange (in chunks past ROWS_PER_CHUNK rows) and
 * lists everyone's: a few mutations a second in all, whatever the number of deliveries.
 * Records carry their time and expire soon after; a reader skips those older than
 * `freshMs`. Usage is sent with a sequence number and kept for USAGE_KEPT exchanges, so
 * a reader that missed one still charges it, and charges it once. A process with nothing
 * to share still writes an empty record every HEARTBEAT_MS, so that the others count it
 * (countLiveProcesses: the visitor rate limit reads how many processes accept submissions).
 *
 * @module
 */
import type { Db } from "./db.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { processIdOfSharesKey, processSharesKey, processSharesPrefix } from "./keys.ts";

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

/** What a process took from one budget's bucket since its last exchange. */
export interface UsageRow {
  /** The budget's name (outbound_budget.ts). */
  budget: string;
  /** The bucket's key in it: an organization, a host, a destination. */
  key: string;
  amount: number;
}

/** What a process shares: its paces by destination id, its usage since the last exchange. */
export interface Shares {
  paces: Map<string, PaceShare>;
  usage: UsageRow[];
}

/** What the other live processes share: their paces by destination id, their usage not yet seen. */
export interface OthersShares {
  paces: Map<string, PaceShare[]>;
  usage: UsageRow[];
}

type Row =
  | ["p", string, number, number, number, number | null]
  | ["u", number, string, string, number];

/** One chunk as stored: when it was written and its rows. */
interface StoredChunk {
  at: number;
  rows: Row[];
}

/** Rows per record: about 100 bytes each, well under KV's 64 KiB value limit. */
const ROWS_PER_CHUNK = 400;
/** Exchanges a process's usage is kept in its record for. */
const USAGE_KEPT = 3;
/** How recent a record must be for its process to count as live (countLiveProcesses). */
export const LIVE_MS = 10_000;
/** How often an idle process writes its empty record: twice within LIVE_MS. */
const HEARTBEAT_MS = LIVE_MS / 2;

/** Exchanges one process's shares with every other process's. */
export interface ShareExchange {
  /**
   * Writes `mine` and returns the others'; a process with nothing to share, now or at the
   * last exchange, reads nothing and writes an empty record only every HEARTBEAT_MS.
   */
  exchange(mine: Shares): Promise<OthersShares>;
  /** Removes this process's record (on shutdown). */
  withdraw(): Promise<void>;
}

/** The exchange of process `processId`; records live `freshMs` (and expire after twice that). */
export function createShareExchange(
  db: Db,
  options: { processId: string; freshMs: number; now?: () => number },
): ShareExchange {
  const { processId, freshMs } = options;
  const now = options.now ?? Date.now;
  /** Chunks written last time, so that fewer this time delete the rest. */
  let written = 0;
  /** Whether the last record had rows, and when it was written. */
  let sharedLastTime = false;
  let writtenAt = -Infinity;
  let seq = 0;
  /** This process's usage of its last USAGE_KEPT exchanges, as rows. */
  let usageKept: Row[] = [];
  /** The last usage sequence charged here, per other process. */
  const seen = new Map<string, number>();

  async function write(rows: Row[]) {
    // At least one chunk, empty when there is nothing to share: the process is live.
    const chunks = Math.max(1, Math.ceil(rows.length / ROWS_PER_CHUNK));
    const at = now();
    const op = db.kv.atomic();
    for (let i = 0; i < chunks; i++) {
      const chunk = rows.slice(i * ROWS_PER_CHUNK, (i + 1) * ROWS_PER_CHUNK);
      // Kept past LIVE_MS, for countLiveProcesses (readers of shares skip stale ones by `at`).
      op.set(processSharesKey(processId, i), { at, rows: chunk } satisfies StoredChunk, {
        expireIn: 2 * Math.max(freshMs, LIVE_MS),
      });
    }
    for (let i = chunks; i < written; i++) op.delete(processSharesKey(processId, i));
    const result = await retryWhileBusy(() => op.commit());
    if (!result.ok) throw new Error("Cannot write the process's shares: commit refused");
    written = chunks;
    writtenAt = at;
    sharedLastTime = rows.length > 0;
  }

  return {
    async exchange(mine) {
      seq++;
      usageKept = usageKept.filter((row) => row[0] === "u" && row[1] > seq - USAGE_KEPT);
      for (const { budget, key, amount } of mine.usage) {
        usageKept.push(["u", seq, budget, key, amount]);
      }
      const rows: Row[] = [...mine.paces].map(([id, s]): Row => [
        "p",
        id,
        s.limit,
        s.heldUntil,
        s.congestedAt,
        s.rate,
      ]);
      rows.push(...usageKept);
      const others: OthersShares = { paces: new Map(), usage: [] };
      // Idle (nothing to share now or last time): no need of the others', and only the
      // heartbeat written.
      if (rows.length === 0 && !sharedLastTime) {
        if (now() - writtenAt >= HEARTBEAT_MS) await write(rows);
        return others;
      }
      await write(rows);
      const fresh = now() - freshMs;
      const newest = new Map<string, number>();
      for await (const entry of db.kv.list<StoredChunk>({ prefix: processSharesPrefix() })) {
        const id = processIdOfSharesKey(entry.key);
        if (id === processId || entry.value.at < fresh) continue;
        const last = seen.get(id) ?? 0;
        for (const row of entry.value.rows) {
          if (row[0] === "p") {
            const [, destinationId, limit, heldUntil, congestedAt, rate] = row;
            const list = others.paces.get(destinationId) ?? [];
            list.push({ limit, heldUntil, congestedAt, rate });
            others.paces.set(destinationId, list);
          } else if (row[1] > last) {
            others.usage.push({ budget: row[2], key: row[3], amount: row[4] });
            newest.set(id, Math.max(newest.get(id) ?? 0, row[1]));
          }
        }
      }
      for (const [id, last] of newest) seen.set(id, last);
      return others;
    },
    async withdraw() {
      if (written === 0) return;
      const op = db.kv.atomic();
      for (let i = 0; i < written; i++) op.delete(processSharesKey(processId, i));
      await retryWhileBusy(() => op.commit());
      written = 0;
    },
  };
}

/**
 * How many processes share the KV, as far as their records tell (every running service
 * writes one at least every HEARTBEAT_MS): one listing.
 */
export async function countLiveProcesses(db: Db, now = Date.now()): Promise<number> {
  const live = new Set<string>();
  for await (const entry of db.kv.list<StoredChunk>({ prefix: processSharesPrefix() })) {
    if (entry.value.at >= now - LIVE_MS) live.add(processIdOfSharesKey(entry.key));
  }
  return live.size;
}
