/**
 * Group reads for the delivery hot path (claiming a job read from KV): reads asked for
 * while one is under way go to KV together, as one getMany of up to 10 keys (KV's
 * limit), once it returns. Each read waits behind the commits on KV's one SQLite
 * thread, so fewer of them is faster under load (docs/design.md, "Claim hints for every
 * waiting job"). An idle read goes at once.
 *
 * @module
 */

/** KV's limit of keys in one getMany. */
const MAX_KEYS = 10;

/** Reads a few keys at a time, merged with other callers' reads. */
export interface ReadBatcher {
  /** The entries of `keys` (at most 10), as kv.getMany gives them. */
  getMany<T extends readonly unknown[]>(
    keys: readonly [...{ [K in keyof T]: Deno.KvKey }],
  ): Promise<{ [K in keyof T]: Deno.KvEntryMaybe<T[K]> }>;
}

interface Waiting {
  keys: readonly Deno.KvKey[];
  resolve(entries: Deno.KvEntryMaybe<unknown>[]): void;
  reject(error: unknown): void;
}

/** A ReadBatcher over `kv`: one getMany under way at a time. */
export function createReadBatcher(kv: Deno.Kv): ReadBatcher {
  const waiting: Waiting[] = [];
  let reading = false;

  function next() {
    if (reading || waiting.length === 0) return;
    const batch: Waiting[] = [];
    let keys = 0;
    while (waiting.length > 0 && keys + waiting[0].keys.length <= MAX_KEYS) {
      keys += waiting[0].keys.length;
      batch.push(waiting.shift()!);
    }
    reading = true;
    kv.getMany(batch.flatMap((read) => read.keys)).then(
      (entries) => {
        let at = 0;
        for (const read of batch) {
          read.resolve(entries.slice(at, at += read.keys.length));
        }
      },
      (error) => {
        for (const read of batch) read.reject(error);
      },
    ).finally(() => {
      reading = false;
      next();
    });
  }

  return {
    getMany(keys) {
      if (keys.length === 0 || keys.length > MAX_KEYS) {
        return Promise.reject(new RangeError(`A grouped read takes 1 to ${MAX_KEYS} keys`));
      }
      const { promise, resolve, reject } = Promise.withResolvers<Deno.KvEntryMaybe<unknown>[]>();
      waiting.push({ keys, resolve, reject });
      next();
      // deno-lint-ignore no-explicit-any
      return promise as Promise<any>;
    },
  };
}
