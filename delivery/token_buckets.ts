/**
 * Token buckets by key, in memory: the limiter behind the test-send, admin-operation,
 * relay and outbound budgets (outbound_budget.ts). A bucket holds `capacity` tokens and
 * refills continuously, `capacity` per `windowMs`; a take that finds too few tokens is
 * refused with the time until there are enough. A bucket that is full lends: one take
 * larger than the whole capacity (a 128 KB envelope against a small byte budget) goes
 * through and leaves the bucket in debt, so nothing waits for a budget it can never fit.
 * Full buckets are forgotten, so memory follows the keys active within a window.
 * Requests refused are given turns one after another at the bucket's rate (turnMs).
 * Processes sharing a KV drain each other's buckets: each hands what it took lately to
 * the others (takenSince), which charge it to their own (charge), so that together they
 * spend about one bucket's worth. Between two exchanges each of P processes spends at
 * most its part of what a bucket held at the last one (1/P of it, plus the refill), so
 * that P processes with full buckets do not each spend a whole one before they have
 * heard of each other's takes (share); a process starting takes up the others' levels
 * before it spends (debts, join).
 *
 * @module
 */

/** Buckets of one budget, by key. */
export interface TokenBuckets {
  /** Milliseconds until `amount` could be taken from `key`'s bucket (0: now). */
  waitMs(key: string, amount: number, now: number): number;
  /** Takes `amount` from `key`'s bucket (call after waitMs said 0). */
  take(key: string, amount: number, now: number): void;
  /** Gives back what a take took, when the request it was for did not happen. */
  giveBack(key: string, amount: number, now: number): void;
  /**
   * For a request refused now: milliseconds until a turn of its own, after the turns
   * already given to requests refused before it, at the bucket's rate. So many requests
   * refused at once come back one after another, not all at the moment the bucket has
   * room for one.
   */
  turnMs(key: string, amount: number, now: number): number;
  /** What was taken per key (gifts back deducted) since the last call. */
  takenSince(): Map<string, number>;
  /** Charges what another process took from `key`'s bucket to this one (it may go into debt). */
  charge(key: string, amount: number, now: number): void;
  /** Charges `amount` to every bucket whose key starts with `prefix`, but those in `except`. */
  chargeEach(prefix: string, amount: number, now: number, except: Set<string>): void;
  /** What each bucket that is not full lacks (capacity − tokens), by key. */
  debts(now: number): Map<string, number>;
  /** Lowers `key`'s bucket to what another process's lacks, if that is less. */
  join(key: string, debt: number, now: number): void;
  /**
   * A new exchange with the other processes, `processes` of them sharing the buckets with
   * this one included: from now until the next, this process spends at most 1/processes
   * of what each bucket holds now (plus what refills).
   */
  share(processes: number): void;
}

/** Keys kept at most before full buckets are dropped (each is a few dozen bytes). */
const MAX_KEYS = 100_000;

/** Buckets refilling `capacity` per `windowMs`; a capacity of 0 never refuses. */
export function createTokenBuckets(options: { capacity: number; windowMs: number }): TokenBuckets {
  const { capacity, windowMs } = options;
  const perMs = capacity / windowMs;
  const buckets = new Map<string, { tokens: number; at: number }>();
  /** Processes sharing the buckets at the last exchange, and that exchange's number. */
  let processes = 1;
  let exchange = 0;
  /** Per key, in the current exchange: what the bucket held at its first use in it. */
  const held = new Map<string, { exchange: number; tokens: number }>();
  /** The last turn given per key (epoch ms); past ones are dropped. */
  const turns = new Map<string, number>();
  /** Taken per key since takenSince() last ran, for the other processes. */
  let taken = new Map<string, number>();

  function note(key: string, amount: number) {
    const total = (taken.get(key) ?? 0) + amount;
    if (total === 0) taken.delete(key);
    else taken.set(key, total);
  }

  function level(key: string, now: number): number {
    const bucket = buckets.get(key);
    if (bucket === undefined) return capacity;
    return Math.min(capacity, bucket.tokens + (now - bucket.at) * perMs);
  }

  function set(key: string, tokens: number, now: number) {
    if (tokens >= capacity) {
      buckets.delete(key);
      return;
    }
    if (buckets.size >= MAX_KEYS && !buckets.has(key)) {
      for (const [k, b] of buckets) {
        if (b.tokens + (now - b.at) * perMs >= capacity) buckets.delete(k);
      }
    }
    buckets.set(key, { tokens, at: now });
  }

  /** What this process may still take from `key` before the next exchange. */
  function available(key: string, now: number): number {
    const tokens = level(key, now);
    if (processes === 1) return tokens;
    let first = held.get(key);
    if (first?.exchange !== exchange) {
      if (held.size >= MAX_KEYS) held.clear();
      first = { exchange, tokens };
      held.set(key, first);
    }
    // The others' parts of what it held, set aside: they may be taking them now.
    return tokens - Math.max(0, first.tokens) * (1 - 1 / processes);
  }

  function waitMs(key: string, amount: number, now: number): number {
    if (capacity === 0) return 0;
    const tokens = available(key, now);
    // Its whole part there: it lends, as a full bucket does alone.
    if (tokens >= amount || tokens >= capacity / processes) return 0;
    return Math.ceil((Math.min(amount, capacity / processes) - tokens) / perMs);
  }

  return {
    waitMs,
    take(key, amount, now) {
      if (capacity === 0) return;
      set(key, level(key, now) - amount, now);
      note(key, amount);
    },
    giveBack(key, amount, now) {
      if (capacity === 0) return;
      set(key, level(key, now) + amount, now);
      note(key, -amount);
    },
    takenSince() {
      const since = taken;
      taken = new Map();
      return since;
    },
    charge(key, amount, now) {
      if (capacity === 0) return;
      set(key, level(key, now) - amount, now);
    },
    chargeEach(prefix, amount, now, except) {
      if (capacity === 0) return;
      for (const [key, bucket] of buckets) {
        if (!key.startsWith(prefix) || except.has(key)) continue;
        set(key, Math.min(capacity, bucket.tokens + (now - bucket.at) * perMs) - amount, now);
      }
    },
    debts(now) {
      const debts = new Map<string, number>();
      for (const key of buckets.keys()) {
        const debt = capacity - level(key, now);
        if (debt > 0) debts.set(key, debt);
      }
      return debts;
    },
    join(key, debt, now) {
      if (capacity === 0) return;
      if (capacity - debt < level(key, now)) set(key, capacity - debt, now);
    },
    share(count) {
      processes = Math.max(1, count);
      exchange++;
    },
    turnMs(key, amount, now) {
      if (capacity === 0) return 0;
      const wait = waitMs(key, amount, now);
      if (wait === 0) return 0;
      const last = turns.get(key) ?? 0;
      const turn = Math.max(now + wait, last + Math.min(amount, capacity) / perMs);
      if (turns.size >= MAX_KEYS && !turns.has(key)) {
        for (const [k, t] of turns) if (t <= now) turns.delete(k);
      }
      turns.set(key, turn);
      return Math.ceil(turn - now);
    },
  };
}
