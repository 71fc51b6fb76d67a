/**
 * A small pool of idle SMTP sessions, keyed by relay and credentials, so several
 * messages to one relay share a connection. Idle sessions are closed after a few
 * seconds, by one timer for the whole pool (a timer set and cleared per message cost
 * more than the pool's own code); it never keeps the process alive.
 *
 * @module
 */
import type { SmtpConnection } from "./client.ts";

/** Options of {@linkcode SmtpPool}. */
export interface SmtpPoolOptions {
  /** How long a session may sit idle before it is closed; 0 disables pooling. */
  idleMs: number;
  /** Idle sessions kept per key; more are closed when returned. */
  maxIdlePerKey: number;
  /** The clock (ms) idle times are measured by; performance.now by default. */
  now?: () => number;
}

interface IdleEntry {
  connection: SmtpConnection;
  /** When it was put back (the pool's clock). */
  since: number;
}

/** Idle authenticated sessions, most recently used first out. */
export class SmtpPool {
  /** Per key, oldest first: sessions are taken from the end, and expire from the front. */
  #idle = new Map<string, IdleEntry[]>();
  #options: SmtpPoolOptions;
  #closed = false;
  /** Closes the sessions idle too long; set while any session is idle. */
  #reaper: ReturnType<typeof setTimeout> | null = null;

  #now: () => number;

  constructor(options: SmtpPoolOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
  }

  /** An idle session for `key`, removed from the pool, or undefined. */
  take(key: string): SmtpConnection | undefined {
    const entries = this.#idle.get(key);
    while (entries && entries.length > 0) {
      const entry = entries.pop()!;
      if (entries.length === 0) this.#idle.delete(key);
      if (!entry.connection.closed) return entry.connection;
    }
    return undefined;
  }

  /**
   * Keeps a session after a successful message. Returns false when the pool
   * cannot hold it (closed, disabled or full): the caller ends the session.
   */
  put(key: string, connection: SmtpConnection): boolean {
    connection.release();
    const entries = this.#idle.get(key) ?? [];
    if (
      this.#closed || connection.closed || this.#options.idleMs <= 0 ||
      entries.length >= this.#options.maxIdlePerKey
    ) {
      return false;
    }
    entries.push({ connection, since: this.#now() });
    this.#idle.set(key, entries);
    // A session put back now expires after every one already idle: a set timer stays.
    this.#reaper ??= this.#reapIn(this.#options.idleMs);
    return true;
  }

  /** The reaper, due in `ms`. */
  #reapIn(ms: number): ReturnType<typeof setTimeout> {
    const timer = setTimeout(() => this.#reap(), ms);
    // Deno timer ids are numbers; node's typings, when loaded, say Timeout.
    Deno.unrefTimer(Number(timer));
    return timer;
  }

  /** Closes the sessions idle for idleMs or more, and waits for the next one to be. */
  #reap(): void {
    this.#reaper = null;
    const expired = this.#now() - this.#options.idleMs;
    let next = Infinity;
    for (const [key, entries] of this.#idle) {
      let stale = 0;
      while (stale < entries.length && entries[stale].since <= expired) stale++;
      for (const { connection } of entries.splice(0, stale)) void connection.quitQuietly();
      if (entries.length === 0) this.#idle.delete(key);
      else next = Math.min(next, entries[0].since);
    }
    if (next !== Infinity) this.#reaper = this.#reapIn(Math.max(1, next - expired));
  }

  /** Closes every idle session; sessions returned later are closed too. */
  close(): void {
    this.#closed = true;
    if (this.#reaper !== null) clearTimeout(this.#reaper);
    this.#reaper = null;
    for (const entries of this.#idle.values()) {
      for (const entry of entries) entry.connection.close();
    }
    this.#idle.clear();
  }
}

/** A message waiting for a session slot; `rider` is what an adopter may take (adopt). */
interface Waiter<R> {
  /** Gives it a slot of its own. */
  admit(): void;
  rider?: R;
  /** Taken off the wait by a session (adopt): no time-out or abort ends it from now on. */
  adopted(): (release: () => void) => void;
}

/** A waiting message a session took to carry next (RelayGate.adopt). */
export interface Adopted<R> {
  rider: R;
  /** Ends its wait, giving it the carrying session's slot (its release). */
  handOver(release: () => void): void;
}

/** One relay's sessions: how many may be open, how many are, and who waits. */
interface RelayLoad<R> {
  limit: number;
  open: number;
  waiting: Waiter<R>[];
  /** Messages accepted while the relay was used to its limit, since the limit last grew. */
  sent: number;
  /** The limit at which the relay last refused (0: never), and when (performance.now()). */
  refusedAt: number;
  slowedAt: number;
}

/** How many more messages it takes to try the limit a relay refused at again. */
const REPROBE_ROUNDS = 8;
/** Relays whose learnt limit is remembered at most (least recently used go first). */
const MAX_RELAYS = 10_000;

/**
 * Sessions open at once per relay, as Postfix's destination concurrency: relays limit
 * connections per client, so messages to one relay share a few (and the idle pool),
 * however many destinations use it. A relay starts at `initial`; each `limit` messages it
 * accepts while used to its limit give it one more, up to `max`; a 421 or 451 ("too many
 * connections", "slow down") halves it, down to one. Back at the level where it refused,
 * it is tried again only after REPROBE_ROUNDS times as many (so a relay's connection limit
 * costs a refusal now and then, not every few messages). What a relay's limit came to is
 * remembered while it differs from `initial`.
 */
export class RelayGate<R = never> {
  #relays = new Map<string, RelayLoad<R>>();
  #initial: number;
  #max: number;

  constructor(initial: number, max: number = initial) {
    this.#initial = Math.min(initial, max);
    this.#max = max;
  }

  /**
   * Waits for a session slot to `key` until `deadline` (epoch ms) or `signal`; resolves
   * with its release, or rejects with `timedOut()`'s error or the signal's reason. A
   * waiter with a `rider` may instead be adopted by a session already open (adopt).
   */
  enter(
    key: string,
    options: { deadline: number; signal: AbortSignal; timedOut: () => Error; rider?: R },
  ): Promise<() => void> {
    const load = this.#relays.get(key) ??
      { limit: this.#initial, open: 0, waiting: [], sent: 0, refusedAt: 0, slowedAt: -Infinity };
    // Most recently used last.
    this.#relays.delete(key);
    this.#relays.set(key, load);
    if (this.#relays.size > MAX_RELAYS) {
      const [oldest, its] = this.#relays.entries().next().value!;
      if (its.open === 0) this.#relays.delete(oldest);
    }
    const release = () => {
      load.open--;
      // Only as many as the limit allows now (it may have been halved or grown meanwhile).
      while (load.open < load.limit && load.waiting.length > 0) load.waiting.shift()!.admit();
      if (load.open > 0 || load.waiting.length > 0) return;
      // A relay at its starting count is forgotten once idle; a grown or slowed one is remembered.
      if (load.limit === this.#initial) this.#relays.delete(key);
    };
    if (load.open < load.limit) {
      load.open++;
      return Promise.resolve(once(release));
    }
    const { promise, resolve, reject } = Promise.withResolvers<() => void>();
    const stopWaiting = () => {
      clearTimeout(timer);
      options.signal.removeEventListener("abort", abort);
    };
    const waiter: Waiter<R> = {
      admit() {
        stopWaiting();
        load.open++;
        resolve(once(release));
      },
      rider: options.rider,
      adopted() {
        stopWaiting();
        return resolve;
      },
    };
    const leave = (error: unknown) => {
      load.waiting.splice(load.waiting.indexOf(waiter), 1);
      options.signal.removeEventListener("abort", abort);
      reject(error);
    };
    const abort = () => {
      clearTimeout(timer);
      leave(options.signal.reason);
    };
    const timer = setTimeout(
      () => leave(options.timedOut()),
      Math.max(0, options.deadline - Date.now()),
    );
    options.signal.addEventListener("abort", abort, { once: true });
    load.waiting.push(waiter);
    return promise;
  }

  /**
   * Takes the first message waiting for a slot to `key` whose rider `fits`, off the
   * wait: the session holding a slot carries it next. Its wait ends when `handOver` is
   * called with that session's slot release, which it then owns.
   */
  adopt(key: string, fits: (rider: R) => boolean): Adopted<R> | undefined {
    const waiting = this.#relays.get(key)?.waiting;
    const at = waiting?.findIndex((w) => w.rider !== undefined && fits(w.rider)) ?? -1;
    if (at < 0) return undefined;
    const [waiter] = waiting!.splice(at, 1);
    return { rider: waiter.rider!, handOver: waiter.adopted() };
  }

  /** The relay accepted a message (called before the session's slot is released). */
  accepted(key: string): void {
    const load = this.#relays.get(key);
    if (load === undefined || load.limit >= this.#max) return;
    // Growth needs demand: a relay used below its limit proves nothing about more.
    if (load.open < load.limit && load.waiting.length === 0) return;
    const rounds = load.limit + 1 >= load.refusedAt && load.refusedAt > 0 ? REPROBE_ROUNDS : 1;
    if (++load.sent >= load.limit * rounds) {
      load.sent = 0;
      load.limit++;
    }
  }

  /**
   * The relay said "too many": fewer sessions to it from now on. `enteredAt` (from
   * performance.now()) is when the refused session got its slot: one that got it before the
   * last halving was opened under the larger limit, which that halving already answered.
   */
  slowDown(key: string, enteredAt: number = performance.now()): void {
    const load = this.#relays.get(key);
    if (load === undefined || enteredAt < load.slowedAt) return;
    load.slowedAt = performance.now();
    load.refusedAt = load.limit;
    load.limit = Math.max(1, Math.floor(load.limit / 2));
    load.sent = 0;
  }

  /** Sessions that may be open to `key` now. */
  limit(key: string): number {
    return this.#relays.get(key)?.limit ?? this.#initial;
  }
}

function once(release: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    release();
  };
}
