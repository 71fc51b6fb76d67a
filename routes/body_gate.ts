/**
 * Request bodies within bounds: memory and time.
 *
 * A body is read and processed (parsed, sealed, stored) only with room reserved in a
 * budget of declared bytes (`HTTP_BODY_MEMORY_BYTES`; a body without a length counts
 * as its cap), and one client may hold at most half of it, so neither many large
 * bodies at once nor one client trickling many can take memory the budget does not
 * allow: past it, new bodies are refused at once with 503 and `Retry-After`. The body's
 * deadline is readBodyWithin's (routes/http.ts).
 *
 * @module
 */
import type { Context } from "hono";
import { ApiError } from "./http.ts";
import { ERRORS } from "./errors.ts";

/** Room reserved for one body; release it once the body's data is no longer held. */
export interface BodyLease {
  release(): void;
}

/** The budget of body bytes being read and processed at once. */
export interface BodyGate {
  /** Reserves room for `bytes` of client `key`; throws 503 when there is none. */
  admit(c: Context, key: string, bytes: number): BodyLease;
  /** Bytes and bodies held now. */
  stats(): { bytes: number; bodies: number };
}

/** How long a refused client is asked to wait (seconds). */
const RETRY_AFTER_SECONDS = 1;

/** A gate over `memoryBytes` of bodies. */
export function createBodyGate(memoryBytes: number): BodyGate {
  const perClient = Math.floor(memoryBytes / 2);
  const byClient = new Map<string, number>();
  let held = 0;
  let bodies = 0;
  return {
    admit(c, key, bytes) {
      const client = byClient.get(key) ?? 0;
      if (held + bytes > memoryBytes || client + bytes > perClient) {
        c.header("Retry-After", String(RETRY_AFTER_SECONDS));
        c.header("Connection", "close");
        throw new ApiError(ERRORS.serverBusy, {
          retryAfter: RETRY_AFTER_SECONDS,
        });
      }
      held += bytes;
      bodies++;
      byClient.set(key, client + bytes);
      let released = false;
      return {
        release() {
          if (released) return;
          released = true;
          held -= bytes;
          bodies--;
          const left = byClient.get(key)! - bytes;
          if (left === 0) byClient.delete(key);
          else byClient.set(key, left);
        },
      };
    },
    stats: () => ({ bytes: held, bodies }),
  };
}
