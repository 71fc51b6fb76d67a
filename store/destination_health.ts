/**
 * Destination health: since when a destination has been failing by its own fault, and
 * pausing it once that has lasted DESTINATION_PAUSE_AFTER_HOURS with no delivery in
 * between (as Svix disables an endpoint after 5 days of failing). A time span, never a
 * count: ten refused posts in ten seconds pause nothing. Failures that are one
 * submission's fault (DeliveryError.blame "submission": HTTP 422, an SMTP recipient
 * refused) neither count nor clear. Pausing sets the destination's `health`, apart from
 * the tenant's `isEnabled`; its jobs are then held, not dropped (apply_result.ts).
 *
 * @module
 */
import type { Blame } from "../connectors/types.ts";
import { redactUrls } from "../redact.ts";
import { type Db, retryAtomic } from "./db.ts";
import type { DestinationRecord } from "./destinations.ts";
import type { JobRecord } from "./job_record.ts";
import { destinationFailingKey, destinationKey } from "./keys.ts";
import { OUTCOME_TTL_MS } from "./outcomes.ts";

/** Since when a destination has been failing (epoch ms), how often, and the last error. */
export interface FailingRecord {
  since: number;
  failures: number;
  lastError: string | null;
}

/** What one attempt tells about its destination's health. */
export type HealthSignal =
  | { delivered: true }
  | {
    delivered: false;
    blame: Blame;
    error: string | null;
    /** The service says the destination no longer exists (a deleted webhook): pause at once. */
    gone?: boolean;
  };

/** How long a destination found with no failing record is taken to have none. */
const CLEAR_RECHECK_MS = 10_000;
/** Destinations remembered as clear at most. */
const MAX_CLEAR_TRACKED = 50_000;

/** Longest last-error text kept in a pause reason. */
const MAX_REASON_ERROR = 300;

/**
 * The reason shown on a destination the service paused. Its URLs are cut down once
 * more, whatever wrote the job's last error (a DeliveryError's text already is).
 */
function pauseReason(failing: FailingRecord): string {
  const since = new Date(failing.since).toISOString();
  const error = redactUrls(failing.lastError ?? "unknown error").slice(0, MAX_REASON_ERROR);
  return `Failing since ${since} with no delivery in between ` +
    `(${failing.failures} failed attempts); last error: ${error}`;
}

/** The reason shown on a destination paused at once because its service says it is gone. */
function goneReason(error: string | null): string {
  const text = redactUrls(error ?? "unknown error").slice(0, MAX_REASON_ERROR);
  return `The service says this destination no longer exists (${text})`;
}

/**
 * Records what an attempt tells about its destination: a delivery clears the failing
 * record; a failure by the destination's fault starts it or adds to it, and pauses the
 * destination (same atomic commit) once the first failure is `pauseAfterMs` old, or at
 * once when the service says the destination is gone (a deleted webhook or chat).
 * Failures of a destination that is disabled, paused or deleted are not counted.
 * `pauseAfterMs` 0 records nothing. Returns whether the destination was paused.
 */
export async function recordHealth(
  db: Db,
  job: Pick<JobRecord, "formId" | "destinationId">,
  signal: HealthSignal,
  options: {
    pauseAfterMs: number;
    now: number;
    /**
     * Destinations this process found with no failing record, and when: a delivery to
     * one of them within CLEAR_RECHECK_MS reads nothing (the common case costs no KV read).
     * A failing record another process writes meanwhile is cleared that much later.
     */
    clear?: Map<string, number>;
  },
): Promise<boolean> {
  const { pauseAfterMs, now, clear } = options;
  if (pauseAfterMs <= 0) return false;
  if (!signal.delivered && signal.blame === "submission") return false;
  const failingKey = destinationFailingKey(job.destinationId);
  const recordKey = destinationKey(job.formId, job.destinationId);

  if (signal.delivered) {
    const seen = clear?.get(job.destinationId);
    if (seen !== undefined && now - seen < CLEAR_RECHECK_MS) return false;
    await retryAtomic(async () => {
      const failing = await db.kv.get<FailingRecord>(failingKey);
      if (failing.value === null) return { op: null, result: undefined };
      return { op: db.kv.atomic().check(failing).delete(failingKey), result: undefined };
    });
    if (clear !== undefined) {
      if (clear.size >= MAX_CLEAR_TRACKED) clear.clear();
      clear.set(job.destinationId, now);
    }
    return false;
  }
  clear?.delete(job.destinationId);

  const paused = await retryAtomic(async () => {
    const [failing, entry] = await db.kv.getMany<[FailingRecord, DestinationRecord]>([
      failingKey,
      recordKey,
    ]);
    const destination = entry.value;
    if (destination === null) {
      // Deleted: leave no record behind (a late outcome after deleteDestination).
      const op = failing.value === null ? null : db.kv.atomic().check(failing).delete(failingKey);
      return { op, result: false };
    }
    if (!destination.isEnabled || destination.health.state === "paused") {
      return { op: null, result: false };
    }
    const next: FailingRecord = {
      since: failing.value?.since ?? now,
      failures: (failing.value?.failures ?? 0) + 1,
      lastError: signal.error,
    };
    // Kept as long as outcomes are, so the records of deleted forms' destinations go too.
    const op = db.kv.atomic().check(failing).set(failingKey, next, { expireIn: OUTCOME_TTL_MS });
    const gone = !signal.delivered && signal.gone === true;
    if (!gone && now - next.since < pauseAfterMs) return { op, result: false };
    const at = new Date(now).toISOString();
    const reason = gone ? goneReason(signal.error) : pauseReason(next);
    const updated: DestinationRecord = {
      ...destination,
      health: { state: "paused", reason, since: at },
      updatedAt: at,
    };
    return { op: op.check(entry).set(recordKey, updated), result: true };
  });
  if (paused) db.formVersion.bump();
  return paused;
}
