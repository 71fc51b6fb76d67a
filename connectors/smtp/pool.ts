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
