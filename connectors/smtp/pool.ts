/**
 * A small pool of idle SMTP sessions, keyed by relay and credentials, so several
 * messages to one relay share a connection. Idle sessions are closed after a few
 * seconds; their timers never keep the process alive.
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
}

interface IdleEntry {
  connection: SmtpConnection;
  timer: ReturnType<typeof setTimeout>;
}

/** Idle authenticated sessions, most recently used first out. */
export class SmtpPool {
  #idle = new Map<string, IdleEntry[]>();
  #options: SmtpPoolOptions;
  #closed = false;

  constructor(options: SmtpPoolOptions) {
    this.#options = options;
  }

  /** An idle session for `key`, removed from the pool, or undefined. */
  take(key: string): SmtpConnection | undefined {
    const entries = this.#idle.get(key);
    while (entries && entries.length > 0) {
      const entry = entries.pop()!;
      clearTimeout(entry.timer);
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
    const entry: IdleEntry = {
      connection,
      timer: setTimeout(() => {
        const list = this.#idle.get(key);
        const index = list?.indexOf(entry) ?? -1;
        if (list && index >= 0) {
          list.splice(index, 1);
          if (list.length === 0) this.#idle.delete(key);
        }
        void connection.quitQuietly();
      }, this.#options.idleMs),
    };
    // Deno timer ids are numbers; node's typings, when loaded, say Timeout.
    Deno.unrefTimer(Number(entry.timer));
    entries.push(entry);
    this.#idle.set(key, entries);
    return true;
  }

  /** Closes every idle session; sessions returned later are closed too. */
  close(): void {
    this.#closed = true;
    for (const entries of this.#idle.values()) {
      for (const entry of entries) {
        clearTimeout(entry.timer);
        entry.connection.close();
      }
    }
    this.#idle.clear();
  }
}

/** One relay's sessions: how many may be open, how many are, and who waits. */
interface RelayLoad {
  limit: number;
  open: number;
  waiting: (() => void)[];
  sent: number;
}

/**
 * Sessions open at once per relay: relays limit connections per client, so messages to
 * one relay share a few (and the idle pool), however many destinations use it. A relay
 * that answers 421 or 451 ("too many connections", "slow down") gets half as many, down
 * to one; every `max` messages it accepts give one back, up to `max`.
 */
export class RelayGate {
  #relays = new Map<string, RelayLoad>();
  #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  /**
   * Waits for a session slot to `key` until `deadline` (epoch ms) or `signal`; resolves
   * with its release, or rejects with `timedOut()`'s error or the signal's reason.
   */
  enter(
    key: string,
    options: { deadline: number; signal: AbortSignal; timedOut: () => Error },
  ): Promise<() => void> {
    const load = this.#relays.get(key) ?? { limit: this.#max, open: 0, waiting: [], sent: 0 };
    this.#relays.set(key, load);
    const release = () => {
      load.open--;
      const next = load.waiting.shift();
      if (next) next();
      // A relay at its full count is forgotten once idle; a slowed one is remembered.
      else if (load.open === 0 && load.limit >= this.#max) this.#relays.delete(key);
    };
    if (load.open < load.limit) {
      load.open++;
      return Promise.resolve(once(release));
    }
    const { promise, resolve, reject } = Promise.withResolvers<() => void>();
    const admit = () => {
      clearTimeout(timer);
      options.signal.removeEventListener("abort", abort);
      load.open++;
      resolve(once(release));
    };
    const leave = (error: unknown) => {
      load.waiting.splice(load.waiting.indexOf(admit), 1);
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
    load.waiting.push(admit);
    return promise;
  }

  /** The relay accepted a message. */
  accepted(key: string): void {
    const load = this.#relays.get(key);
    if (load === undefined || load.limit >= this.#max) return;
    if (++load.sent >= this.#max) {
      load.sent = 0;
      load.limit++;
    }
  }

  /** The relay said "too many": fewer sessions to it from now on. */
  slowDown(key: string): void {
    const load = this.#relays.get(key);
    if (load !== undefined) load.limit = Math.max(1, Math.floor(load.limit / 2));
  }

  /** Sessions that may be open to `key` now. */
  limit(key: string): number {
    return this.#relays.get(key)?.limit ?? this.#max;
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
