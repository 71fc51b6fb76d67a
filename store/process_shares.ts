/**
 * What each live process shares with the others on its KV, so that together they pace
 * each receiver and spend each budget as one: the paces it keeps to the destinations it
 * delivers to (delivery/pace.ts merges them), what it took from the budgets that protect
 * third parties lately (delivery/outbound_budget.ts charges it to its own) and what its
 * buckets lack (a process starting joins them). Each process writes one record an
 * exchange and lists everyone's: a few mutations a second in all, whatever the number of
 * deliveries. Records carry their time and expire soon after; a reader skips those older
 * than `freshMs`. Usage is sent with a sequence number and kept for USAGE_KEPT exchanges,
 * so a reader that missed one still charges it, and charges it once. A process with
 * nothing to share still writes an empty record every HEARTBEAT_MS, so that the others
 * count it (countLiveProcesses: the visitor rate limit reads how many processes accept
 * submissions).
 *
 * A record is bounded by size, whatever a tenant configures: budget keys hold hosts as
 * digests of fixed length (outbound_budget.ts), an organization has at most
 * ROWS_PER_ORG rows of one budget in it (its largest; the rest summed into one `org|*`
 * row of their average), a pace that does not differ from a fresh one's is shared as the
 * destination's id alone (the others count this process among its senders), and rows go
 * into chunks of at most CHUNK_BYTES, MAX_CHUNKS of them (what does not fit, the
 * least of it, is left out). A write that fails anyway (KV refused it) leaves an empty
 * record, so the process is still counted, and the others' are still read.
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

/**
 * What a process shares: its paces by destination id, its usage since the last exchange,
 * and what its buckets lack (amount: the lack), for processes joining.
 */
export interface Shares {
  paces: Map<string, PaceShare>;
  usage: UsageRow[];
  debts?: UsageRow[];
}

/**
 * What the other live processes share: their paces by destination id, their usage not yet
 * seen, their buckets' lacks; how many processes share, this one included; and why this
 * process's own record could not be written, if it could not (the others' were read).
 */
export interface OthersShares {
  paces: Map<string, PaceShare[]>;
  usage: UsageRow[];
  debts: UsageRow[];
  processes: number;
  writeError?: unknown;
}

type Row =
  | ["p", string, number, number, number, number | null]
  | ["u", number, string, string, number]
  | ["d", string, string, number]
  /**
   * Destinations delivered to at a fresh pace, their ids alone (space-separated, up to
   * FRESH_PER_ROW), so the others count this sender: one string is far cheaper to store
   * and read than a row each.
   */
  | ["f", string];

/** One chunk as stored: when it was written and its rows. */
interface StoredChunk {
  at: number;
  rows: Row[];
}

/** A chunk's rows, as JSON, at most: under KV's 64 KiB value limit with room to spare. */
const CHUNK_BYTES = 56_000;
/** Chunks a record has at most: under KV's 800 KiB limit of one commit. */
const MAX_CHUNKS = 8;
/** An organization's rows of one budget in a record, at most (the rest summed into one). */
export const ROWS_PER_ORG = 8;
/** Fresh paces' destination ids in one row, at most (about 18 KB of JSON). */
const FRESH_PER_ROW = 500;
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

/**
 * The exchange of process `processId`; records live `freshMs` (and expire after twice
 * that). A pace at `freshLimit` (a fresh destination's, delivery/pace.ts), not held, not
 * rate-limited and not cut within `freshMs`, is shared as its destination's id alone, and
 * read back as a fresh pace: the others lose nothing by it but bytes.
 */
export function createShareExchange(
  db: Db,
  options: { processId: string; freshMs: number; now?: () => number; freshLimit?: number },
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
  /** Exchanges done: the first always reads (a process starting joins the others). */
  let exchanges = 0;
  /** Processes sharing at the last read, this one included. */
  let processes = 1;

  async function write(rows: Row[]) {
    // At least one chunk, empty when there is nothing to share: the process is live.
    const chunks = chunksOf(rows);
    const at = now();
    const op = db.kv.atomic();
    chunks.forEach((chunk, i) => {
      // Kept past LIVE_MS, for countLiveProcesses (readers of shares skip stale ones by `at`).
      op.set(processSharesKey(processId, i), { at, rows: chunk } satisfies StoredChunk, {
        expireIn: 2 * Math.max(freshMs, LIVE_MS),
      });
    });
    for (let i = chunks.length; i < written; i++) op.delete(processSharesKey(processId, i));
    const result = await retryWhileBusy(() => op.commit());
    if (!result.ok) throw new Error("Cannot write the process's shares: commit refused");
    written = chunks.length;
    writtenAt = at;
    sharedLastTime = rows.length > 0;
  }

  /** Writes `rows`; when KV refuses them, an empty record (the process still counts), and says why. */
  async function writeOrMark(rows: Row[]): Promise<unknown> {
    try {
      await write(rows);
      return undefined;
    } catch (error) {
      await write([]).catch(() => {/* the error below says enough */});
      return error;
    }
  }

  /** A fresh pace as read back: one object for all (readers only read it). */
  const freshShare: PaceShare = Object.freeze({
    limit: options.freshLimit ?? 1,
    heldUntil: 0,
    congestedAt: 0,
    rate: null,
  });

  /** A pace the others would take up as a fresh one's: its destination's id says enough. */
  function isFresh(share: PaceShare, at: number): boolean {
    return share.limit === options.freshLimit && share.heldUntil === 0 &&
      share.rate === null && share.congestedAt < at - freshMs;
  }

  async function read(): Promise<OthersShares> {
    const others: OthersShares = { paces: new Map(), usage: [], debts: [], processes: 1 };
    const fresh = now() - freshMs;
    const newest = new Map<string, number>();
    const live = new Set<string>();
    for await (const entry of db.kv.list<StoredChunk>({ prefix: processSharesPrefix() })) {
      const id = processIdOfSharesKey(entry.key);
      if (id === processId || entry.value.at < fresh) continue;
      live.add(id);
      const last = seen.get(id) ?? 0;
      for (const row of entry.value.rows) {
        if (row[0] === "p") {
          const [, destinationId, limit, heldUntil, congestedAt, rate] = row;
          const list = others.paces.get(destinationId) ?? [];
          list.push({ limit, heldUntil, congestedAt, rate });
          others.paces.set(destinationId, list);
        } else if (row[0] === "f") {
          for (const destinationId of row[1].split(" ")) {
            const list = others.paces.get(destinationId) ?? [];
            list.push(freshShare);
            others.paces.set(destinationId, list);
          }
        } else if (row[0] === "d") {
          others.debts.push({ budget: row[1], key: row[2], amount: row[3] });
        } else if (row[1] > last) {
          others.usage.push({ budget: row[2], key: row[3], amount: row[4] });
          newest.set(id, Math.max(newest.get(id) ?? 0, row[1]));
        }
      }
    }
    for (const [id, last] of newest) seen.set(id, last);
    others.processes = processes = 1 + live.size;
    return others;
  }

  return {
    async exchange(mine) {
      seq++;
      const at = now();
      usageKept = usageKept.filter((row) => row[0] === "u" && row[1] > seq - USAGE_KEPT);
      for (const { budget, key, amount } of capPerOrg(mine.usage)) {
        usageKept.push(["u", seq, budget, key, amount]);
      }
      // Usage first: what does not fit is left out from the end (paces, fresh ones, debts).
      const rows: Row[] = [...usageKept];
      const fresh: string[] = [];
      for (const [id, s] of mine.paces) {
        if (isFresh(s, at)) {
          fresh.push(id);
          continue;
        }
        // A cut the others have all read by now is not sent again (a newcomer needs it not).
        const congestedAt = s.congestedAt < at - freshMs ? 0 : s.congestedAt;
        rows.push(["p", id, Math.round(s.limit * 100) / 100, s.heldUntil, congestedAt, s.rate]);
      }
      for (let i = 0; i < fresh.length; i += FRESH_PER_ROW) {
        rows.push(["f", fresh.slice(i, i + FRESH_PER_ROW).join(" ")]);
      }
      for (const { budget, key, amount } of capPerOrg(mine.debts ?? [])) {
        rows.push(["d", budget, key, amount]);
      }
      // Idle (nothing to share now or last time) and joined already: no need of the
      // others', and only the heartbeat written.
      if (rows.length === 0 && !sharedLastTime && exchanges > 0) {
        if (now() - writtenAt >= HEARTBEAT_MS) await write(rows);
        return { paces: new Map(), usage: [], debts: [], processes };
      }
      exchanges++;
      const writeError = await writeOrMark(rows);
      const others = await read();
      return writeError === undefined ? others : { ...others, writeError };
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
 * Rows with at most ROWS_PER_ORG per budget and organization (keys `org|…`; keys of an
 * organization alone are one row each): the largest, and the rest as one `org|*` row of
 * their average, which a reader charges to each of the organization's other buckets.
 */
export function capPerOrg(rows: UsageRow[]): UsageRow[] {
  const groups = new Map<string, UsageRow[]>();
  const capped: UsageRow[] = [];
  for (const row of rows) {
    const bar = row.key.indexOf("|");
    if (bar < 0) {
      capped.push(row);
      continue;
    }
    const group = `${row.budget} ${row.key.slice(0, bar)}`;
    const list = groups.get(group) ?? [];
    list.push(row);
    groups.set(group, list);
  }
  for (const list of groups.values()) {
    if (list.length <= ROWS_PER_ORG) {
      capped.push(...list);
      continue;
    }
    list.sort((a, b) => b.amount - a.amount);
    capped.push(...list.slice(0, ROWS_PER_ORG - 1));
    const rest = list.slice(ROWS_PER_ORG - 1);
    const { budget, key } = rest[0];
    const sum = rest.reduce((total, row) => total + row.amount, 0);
    capped.push({ budget, key: `${key.slice(0, key.indexOf("|"))}|*`, amount: sum / rest.length });
  }
  return capped;
}

/** `rows` in chunks of at most CHUNK_BYTES as JSON, MAX_CHUNKS of them; at least one, empty. */
function chunksOf(rows: Row[]): Row[][] {
  const chunks: Row[][] = [[]];
  let bytes = 0;
  for (const row of rows) {
    const size = JSON.stringify(row).length + 1;
    if (bytes + size > CHUNK_BYTES) {
      if (chunks.length === MAX_CHUNKS) break;
      chunks.push([]);
      bytes = 0;
    }
    chunks.at(-1)!.push(row);
    bytes += size;
  }
  return chunks;
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
