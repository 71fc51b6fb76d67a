/**
 * A fixed-window limit of submissions per form and client, kept by every process
 * sharing a KV together.
 *
 * A slot is reserved when a request is admitted, before its body is read, and either
 * counted (the submission was accepted, or its captcha failed) or released, so
 * concurrent requests from one client can never pass the limit in one process.
 *
 * - A client's first submission in a window costs a process nothing in KV: one-off
 *   visitors, the great majority, are neither read nor written.
 * - From its second here on, every count is written to KV under the counter's own key
 *   (so processes never overwrite each other), group-committed and not waited for (but
 *   see the process alone, below); a counter forgotten (past MAX_TRACKED) has its count
 *   sent first and its client is read again, so a flood of other addresses costs a
 *   client's count at most one submission (its next is a first one again).
 * - Before admitting a client it has seen before in the window, a process reads the
 *   client's counts (one listing: what every process wrote) and adds what it has not
 *   written yet. Past the limit it refuses without reading: counts only grow within a
 *   window.
 * - Unless no other process can have counted the client: a service's limiter (given its
 *   process id) marks in KV that it counts clients, before it admits anything and again
 *   every PROCESS_COUNT_EVERY_MS while it admits, and the marks outlive two windows. When
 *   no other process's mark is recent enough to have counted in the client's window,
 *   and no other process's record is live (processes started together have written
 *   their records before any admits, but may not have marked yet), the process's own
 *   counts are the whole count: a repeat visitor costs no read, and its count is written
 *   only once it reaches half the limit (for a successor after a crash), when the
 *   process stops (flush), when it finds another process, and before the counter is
 *   forgotten. A repeat visitor below half the limit thus costs what a one-off costs. A
 *   process starting meanwhile reads this one's written counts from its first request;
 *   this one writes the rest and reads the newcomer's from its next look at the marks,
 *   at most PROCESS_COUNT_EVERY_MS later, so that while it has not looked, the two let a
 *   client through at most 2 × the limit. A process restarted within a window finds its
 *   predecessor's mark and reads: after a stop, every count was written; after a crash,
 *   what was under half the limit is lost, so the successor lets a client through at
 *   most half the limit more.
 *
 * So the only submissions no process can see are each process's first of a client:
 * N processes admit at most the limit + N − 1 (plus requests racing in the same
 * millisecond), and a process restarted after a stop at most one more. When more
 * processes share the KV than half the limit (counted from their process records:
 * process_shares.ts), a first submission is read and written too, so the bound stays
 * within 2 × the limit however many run. That holds although counts are up to
 * PROCESS_COUNT_EVERY_MS old and processes start at any time, because every service
 * writes its process record before it admits anything and keeps it fresh (service.ts,
 * process_shares.ts): of the processes letting firsts through unseen at one moment, the
 * one that counted last counted them all, and found them at most half the limit. The
 * client appears in KV only as a keyed hash (Sealer.pseudonym), never as an address;
 * counters expire after their window.
 *
 * @module
 */
import type { Db } from "./db.ts";
import {
  processIdOfRateProcessKey,
  rateCountsPrefix,
  rateKey,
  rateProcessesPrefix,
  rateProcessKey,
} from "./keys.ts";
import { countLiveProcesses } from "./process_shares.ts";

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
  /** Writes every count not written yet (a process that stops), and waits for the commits. */
  flush(): Promise<void>;
}

/**
 * Counters kept in memory before those of ended windows, of one-off clients and those
 * written to KV are dropped (a client dropped and seen again has one submission no
 * process sees, as a first one).
 */
const MAX_TRACKED = 50_000;
/**
 * How often the number of processes sharing the KV is counted again (one listing), and
 * this process's mark renewed and the others' read (one write, one listing).
 */
const PROCESS_COUNT_EVERY_MS = 10_000;
/** A mark older than a window's start by this much is of a process that did not count in it. */
const MARK_SLACK_MS = 2 * PROCESS_COUNT_EVERY_MS;

interface Counter {
  window: number;
  /** Counted here, and of those written to KV. */
  counted: number;
  written: number;
  reserved: number;
  /** Counted by other processes (and by this one before it forgot the counter), as last read. */
  others: number;
  /**
   * Its own key's last part: a counter forgotten and made again writes under a new one.
   * Made at its first write (null until then): most counters never reach KV.
   */
  id: string | null;
  client: ClientRef;
}

/** A form and the client, whose keyed hash (made when KV is first needed) keys its counts. */
interface ClientRef {
  formId: string;
  clientKey: string;
  hash?: string;
}

const UNLIMITED: RateSlot = { count() {}, release() {} };

/**
 * A limiter of `max` per `windowMs` (0: no limit). With `processId` (a service's: its
 * process record's), it marks that it counts and skips reads no other process can
 * affect; without, it reads whenever it has seen a client before.
 */
export function createRateLimiter(
  db: Db,
  options: { max: number; windowMs: number; now?: () => number; processId?: string },
): RateLimiter {
  const { processId, windowMs } = options;
  const now = options.now ?? Date.now;
  const counters = new Map<string, Counter>();
  let processes = 1;
  let processesCountedAt = -Infinity;
  /** The newest mark of another process, as last read (unknown until read: +Infinity). */
  let othersMarkedAt = Infinity;
  /**
   * The window in which a counter with counts in KV was forgotten: its client, seen again,
   * is read even when this process counts alone (its count is in KV, not here).
   */
  let forgottenInWindow = -1;
  /** The commits of counts under way, which a flush waits for. */
  const writing = new Set<Promise<unknown>>();
  /** A count written from here on even while alone: what a successor after a crash finds. */
  const crashWriteAt = Math.ceil(options.max / 2);

  /** Renews this process's mark and reads when another last marked. */
  async function mark() {
    if (processId === undefined) return;
    const at = now();
    await db.kv.set(rateProcessKey(processId), at, { expireIn: 2 * windowMs + MARK_SLACK_MS });
    let newest = -Infinity;
    for await (const entry of db.kv.list<number>({ prefix: rateProcessesPrefix() })) {
      if (processIdOfRateProcessKey(entry.key) !== processId) {
        newest = Math.max(newest, entry.value);
      }
    }
    othersMarkedAt = newest;
  }

  /**
   * Counts the processes sharing the KV and renews the mark now and then, in the
   * background; the first time is waited for, so that a new process knows from its first
   * request, and is known before it admits anything.
   */
  async function recountProcesses() {
    if (now() - processesCountedAt < PROCESS_COUNT_EVERY_MS) return;
    const first = processesCountedAt === -Infinity;
    processesCountedAt = now();
    // A count that fails keeps the last one; a mark that fails reads from then on.
    const counting = Promise.allSettled([
      countLiveProcesses(db).then((n) => void (processes = Math.max(1, n))),
      mark().catch(() => {
        othersMarkedAt = Infinity; // not marked: others may not know of this process either
      }),
    ]).then(() => {
      // Another process runs now: it has to find what this one kept to itself.
      if (!alone(Math.floor(now() / windowMs))) writeAll();
    });
    if (first) await counting;
  }

  /**
   * No other process can have counted a client in `window`: this one's counts are all.
   * Processes that started with this one have written their records but may not have
   * marked yet: a process with another live record is not alone either.
   */
  const alone = (window: number) =>
    processes === 1 && othersMarkedAt + MARK_SLACK_MS < window * windowMs;

  /** Too many processes for each to let a client's first submission through unseen. */
  const crowded = () => 2 * processes > options.max;

  /**
   * Drops every counter without a reservation: those of ended windows, and the others once
   * their counts are in KV (a count of one, a first submission, is not written).
   */
  function forget(window: number) {
    for (const [key, c] of counters) {
      if (c.reserved > 0) continue;
      if (c.window === window && c.counted >= 2) {
        write(c);
        forgottenInWindow = window;
      }
      counters.delete(key);
    }
  }

  function counterOf(formId: string, clientKey: string, window: number): Counter {
    const mapKey = `${formId}|${clientKey}`;
    let counter = counters.get(mapKey);
    if (counter?.window !== window) {
      if (counters.size >= MAX_TRACKED) forget(window);
      const client = { formId, clientKey };
      counter = { window, counted: 0, written: 0, reserved: 0, others: 0, id: null, client };
      counters.set(mapKey, counter);
    }
    return counter;
  }

  /** The client's keyed hash, made once and only for a read or a write (it costs a hash). */
  const hashOf = (client: ClientRef) => client.hash ??= db.sealer.pseudonym(client.clientKey);

  /** What the client has used in the window, as far as this process knows. */
  const used = (c: Counter) => c.others + c.counted + c.reserved;

  /** Reads what the other processes wrote for the client (the counter's own key aside). */
  async function read(counter: Counter) {
    const { client } = counter;
    let others = 0;
    const prefix = rateCountsPrefix(client.formId, hashOf(client), counter.window);
    for await (const entry of db.kv.list<number>({ prefix })) {
      if (entry.key.at(-1) !== counter.id) others += entry.value;
    }
    counter.others = Math.max(counter.others, others);
  }

  /** Writes this process's count of the client, when it has not been yet. */
  function write(counter: Counter) {
    if (counter.written === counter.counted) return;
    const { client } = counter;
    const count = counter.written = counter.counted;
    counter.id ??= crypto.randomUUID();
    const key = rateKey(client.formId, hashOf(client), counter.window, counter.id);
    const commit = db.batcher.commit({
      apply: (op) => op.set(key, count, { expireIn: windowMs * 2 }),
      mutations: 1,
    }).catch(() => {/* a lost count only loosens the limit */});
    writing.add(commit);
    commit.finally(() => writing.delete(commit));
  }

  /** Writes every count of this window kept to this process (a first submission's aside). */
  function writeAll() {
    const window = Math.floor(now() / windowMs);
    for (const counter of counters.values()) {
      if (counter.window === window && counter.counted >= 2) write(counter);
    }
  }

  /**
   * Whether a count goes to KV now: from a client's second submission on, unless this
   * process counts alone (then from half the limit); a first too when crowded.
   */
  const writesNow = (c: Counter) =>
    crowded() || (c.counted >= 2 && (!alone(c.window) || c.counted >= crashWriteAt));

  return {
    async reserve(formId, clientKey) {
      if (options.max === 0) return UNLIMITED;
      await recountProcesses();
      const window = Math.floor(now() / windowMs);
      const counter = counterOf(formId, clientKey, window);
      const retryAfter = () => {
        const end = (counter.window + 1) * windowMs;
        return { retryAfter: Math.max(1, Math.ceil((end - now()) / 1000)) };
      };
      if (used(counter) >= options.max) return retryAfter();
      // Seen here before, or too many processes for a free first submission each: read,
      // unless no other process can have counted the client and its count is all here.
      const countedElsewhere = !alone(window) || forgottenInWindow === window;
      if ((counter.counted + counter.reserved > 0 || crowded()) && countedElsewhere) {
        await read(counter);
        if (used(counter) >= options.max) return retryAfter();
      }
      counter.reserved++;
      let settled = false;
      return {
        count() {
          if (settled) return;
          settled = true;
          counter.reserved--;
          counter.counted++;
          if (writesNow(counter)) write(counter);
        },
        release() {
          if (settled) return;
          settled = true;
          counter.reserved--;
        },
      };
    },
    async flush() {
      writeAll();
      await Promise.all(writing);
    },
  };
}
