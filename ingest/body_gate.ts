/**
 * Request bodies within bounds: memory and time.
 *
 * A body is read and processed (parsed, sealed, stored) only with room reserved in a
 * budget of declared bytes (`HTTP_BODY_MEMORY_BYTES`; a body without a length counts
 * as its cap). One client address may hold a few bodies' worth of it
 * (`HTTP_BODY_CLIENT_BYTES`, at most half), past which its new bodies are refused at
 * once with 503 and `Retry-After`. When the whole budget is taken, a newcomer gets the
 * room of a body still arriving: the oldest of the address holding the most, whose
 * read ends with 408. So addresses trickling bodies hold room only while nobody else
 * needs it, and a newcomer is refused only when every body held is complete (being
 * processed). The body's deadline and minimum rate are readBodyWithin's
 * (body_reading.ts).
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { BodyRoom } from "../body_reading.ts";
import { Refusal } from "./refusal.ts";

/** Room reserved for one body; release it once the body's data is no longer held. */
export interface BodyLease extends BodyRoom {
  release(): void;
}

/** The budget of body bytes being read and processed at once. */
export interface BodyGate {
  /** Reserves room for `bytes` of client `key`; throws 503 when there is none. */
  admit(key: string, bytes: number): BodyLease;
  /** Bytes and bodies held now. */
  stats(): { bytes: number; bodies: number };
}

/** How long a refused client is asked to wait (seconds). */
const RETRY_AFTER_SECONDS = 1;

/** The budget's limits (Config["http"]). */
type BodyBudget = Pick<Config["http"], "bodyMemoryBytes" | "bodyClientBytes">;

/** One body's room. */
interface Held {
  key: string;
  bytes: number;
  /** When its read began (performance.now()); null until then or once it is read. */
  readingSince: number | null;
  /** Ends its read (set while it is being read). */
  end: (() => void) | null;
  released: boolean;
}

/** A gate over `budget`. */
export function createBodyGate(budget: BodyBudget): BodyGate {
  const perClient = Math.min(budget.bodyClientBytes, Math.floor(budget.bodyMemoryBytes / 2));
  const byClient = new Map<string, number>();
  const leases = new Set<Held>();
  let held = 0;

  function free(lease: Held) {
    if (lease.released) return;
    lease.released = true;
    leases.delete(lease);
    held -= lease.bytes;
    const left = byClient.get(lease.key)! - lease.bytes;
    if (left === 0) byClient.delete(lease.key);
    else byClient.set(lease.key, left);
  }

  /** The body to give way: still being read, of the client holding the most, the oldest. */
  function victim(): Held | null {
    let chosen: Held | null = null;
    let chosenHolds = 0;
    for (const lease of leases) {
      if (lease.readingSince === null) continue;
      const holds = byClient.get(lease.key)!;
      const older = chosen !== null && lease.readingSince < chosen.readingSince!;
      if (chosen === null || holds > chosenHolds || (holds === chosenHolds && older)) {
        chosen = lease;
        chosenHolds = holds;
      }
    }
    return chosen;
  }

  function refuse(): never {
    throw new Refusal("serverBusy", { retryAfter: RETRY_AFTER_SECONDS, closeConnection: true });
  }

  return {
    admit(key, bytes) {
      // The budget's sums hold only for finite, non-negative amounts: NaN would switch
      // every comparison off for good. Callers parse strictly (declaredLength); this fails
      // loudly (a 500, in tests an error) should one ever not.
      if (!Number.isSafeInteger(bytes) || bytes < 0) {
        throw new RangeError(`Body gate: cannot hold ${bytes} bytes`);
      }
      if ((byClient.get(key) ?? 0) + bytes > perClient) refuse();
      while (held + bytes > budget.bodyMemoryBytes) {
        const slow = victim();
        if (slow === null) refuse();
        slow.end!();
        free(slow);
      }
      const lease: Held = { key, bytes, readingSince: null, end: null, released: false };
      leases.add(lease);
      held += bytes;
      byClient.set(key, (byClient.get(key) ?? 0) + bytes);
      return {
        reading(end) {
          lease.readingSince = performance.now();
          lease.end = end;
          return () => {
            lease.readingSince = null;
            lease.end = null;
          };
        },
        release: () => free(lease),
      };
    },
    stats: () => ({ bytes: held, bodies: leases.size }),
  };
}
