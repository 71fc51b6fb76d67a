/**
 * Destination health: since when a destination has been failing by its own fault, and
 * pausing it once that has lasted DESTINATION_PAUSE_AFTER_HOURS with no delivery in
 * between (as Svix disables an endpoint after 5 days of failing). A time span, never a
 * count: ten refused posts in ten seconds pause nothing. Failures that are one
 * submission's fault (DeliveryError.blame "submission": HTTP 422, an SMTP recipient
 * refused) neither count nor clear. Pausing sets the destination's `health`, apart from
 * the tenant's `isEnabled`; its jobs are then held, not dropped (apply_result.ts).
 * A delivery that ends a failing span is a recovery (the caller brings the destination's
 * waiting deliveries forward); `healthAlerts` lists a form's paused and failing
 * destinations in words, for the forms list.
 *
 * @module
 */
import type { Blame } from "../connectors/types.ts";
import { redactUrls } from "../redact.ts";
import { type Db, retryAtomic } from "./db.ts";
import { type DestinationRecord, listDestinationRecords } from "./destinations.ts";
import type { JobRecord } from "./job_record.ts";
import { destinationFailingKey, destinationKey } from "./keys.ts";
import { OUTCOME_TTL_MS } from "./outcomes.ts";

/**
 * Since when a destination has been failing (epoch ms), how often, the last error and
 * its status code, and when its owner was told (null: not yet). The one record of a
 * destination's failing state: pausing reads it, owner notifications read and mark it.
 */
export interface FailingRecord {
  since: number;
  failures: number;
  lastError: string | null;
  /** The last failure's status code (HTTP, SMTP reply), when it had one. */
  lastStatusCode?: number | null;
  /** When the owner was told it is failing (or paused); absent or null: not told. */
  toldAt?: number | null;
}

/** What an attempt changed in its destination's health. */
export interface HealthChange {
  /** The destination was paused by this attempt. */
  paused: boolean;
  /** The failing record as this failure left it; null after a delivery or an uncounted failure. */
  failing: FailingRecord | null;
  /** The failing record a delivery cleared (the destination recovered), else null. */
  cleared: FailingRecord | null;
}

/** What one attempt tells about its destination's health. */
export type HealthSignal =
  | { delivered: true }
  | {
    delivered: false;
    blame: Blame;
    error: string | null;
    statusCode?: number | null;
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

/**
 * The words for a destination that keeps failing but is not paused (yet): since when,
 * how often, and the last error, its URLs cut down as in a pause reason.
 */
function failingReason(failing: FailingRecord): string {
  const since = new Date(failing.since).toISOString();
  const error = redactUrls(failing.lastError ?? "unknown error").slice(0, MAX_REASON_ERROR);
  const attempts = failing.failures === 1
    ? "1 failed attempt"
    : `${failing.failures} failed attempts`;
  return `Failing since ${since} with no delivery in between (${attempts}); last error: ${error}`;
}

/** The reason shown on a destination paused at once because its service says it is gone. */
function goneReason(error: string | null): string {
  const text = redactUrls(error ?? "unknown error").slice(0, MAX_REASON_ERROR);
  return `The service says this destination no longer exists (${text})`;
}

/** A destination of a form that needs its owner: paused, or failing by its own fault. */
export interface DestinationAlert {
  destinationId: string;
  /** The tenant's name for it, if any. */
  name: string | null;
  type: DestinationRecord["type"];
  state: "paused" | "failing";
  /** In words: why, since when, and the last error. */
  reason: string;
  /** ISO time it was paused, or its first failure in a row. */
  since: string;
}

/**
 * The destinations of a form that are paused or failing (oldest destination first).
 * A disabled destination is the tenant's choice and is not listed.
 */
export async function healthAlerts(db: Db, formId: string): Promise<DestinationAlert[]> {
  const destinations = (await listDestinationRecords(db, formId)).filter((d) => d.isEnabled);
  const alerts: DestinationAlert[] = [];
  for (let i = 0; i < destinations.length; i += 10) {
    const batch = destinations.slice(i, i + 10);
    const failing = await db.kv.getMany<FailingRecord[]>(
      batch.map((d) => destinationFailingKey(d.id)),
    );
    batch.forEach((destination, n) => {
      const base = { destinationId: destination.id, name: destination.name ?? null };
      const { type } = destination;
      const { health } = destination;
      if (health.state === "paused") {
        alerts.push({
          ...base,
          type,
          state: "paused",
          reason: health.reason ?? "Paused by the service",
          since: health.since ?? destination.updatedAt,
        });
        return;
      }
      const record = failing[n].value;
      if (record === null) return;
      alerts.push({
        ...base,
        type,
        state: "failing",
        reason: failingReason(record),
        since: new Date(record.since).toISOString(),
      });
    });
  }
  return alerts;
}

/**
 * Records what an attempt tells about its destination: a delivery clears the failing
 * record; a failure by the destination's fault starts it or adds to it, and pauses the
 * destination (same atomic commit) once the first failure is `pauseAfterMs` old, or at
 * once when the service says the destination is gone (a deleted webhook or chat).
 * Failures of a destination that is disabled, paused or deleted are not counted.
 * `pauseAfterMs` 0 pauses nothing (the failing record is kept all the same: owner
 * notifications and the forms list tell from it). A delivery that clears a failing record
 * is a recovery (`cleared`): the caller brings the destination's waiting deliveries forward.
 */
export async function recordHealthChange(
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
): Promise<HealthChange> {
  const { pauseAfterMs, now, clear } = options;
  const unchanged: HealthChange = { paused: false, failing: null, cleared: null };
  if (!signal.delivered && signal.blame === "submission") return unchanged;
  const failingKey = destinationFailingKey(job.destinationId);
  const recordKey = destinationKey(job.formId, job.destinationId);

  if (signal.delivered) {
    const seen = clear?.get(job.destinationId);
    if (seen !== undefined && now - seen < CLEAR_RECHECK_MS) return unchanged;
    const cleared = await retryAtomic(async () => {
      const failing = await db.kv.get<FailingRecord>(failingKey);
      if (failing.value === null) return { op: null, result: null };
      return { op: db.kv.atomic().check(failing).delete(failingKey), result: failing.value };
    });
    if (clear !== undefined) {
      if (clear.size >= MAX_CLEAR_TRACKED) clear.clear();
      clear.set(job.destinationId, now);
    }
    return { ...unchanged, cleared };
  }
  clear?.delete(job.destinationId);

  const change = await retryAtomic<HealthChange>(async () => {
    const [failing, entry] = await db.kv.getMany<[FailingRecord, DestinationRecord]>([
      failingKey,
      recordKey,
    ]);
    const destination = entry.value;
    if (destination === null) {
      // Deleted: leave no record behind (a late outcome after deleteDestination).
      const op = failing.value === null ? null : db.kv.atomic().check(failing).delete(failingKey);
      return { op, result: unchanged };
    }
    if (!destination.isEnabled || destination.health.state === "paused") {
      return { op: null, result: unchanged };
    }
    const next: FailingRecord = {
      since: failing.value?.since ?? now,
      failures: (failing.value?.failures ?? 0) + 1,
      lastError: signal.error,
      lastStatusCode: signal.statusCode ?? null,
      toldAt: failing.value?.toldAt ?? null,
    };
    // Kept as long as outcomes are, so the records of deleted forms' destinations go too.
    const op = db.kv.atomic().check(failing).set(failingKey, next, { expireIn: OUTCOME_TTL_MS });
    const gone = !signal.delivered && signal.gone === true;
    const kept = { op, result: { ...unchanged, failing: next } };
    if (pauseAfterMs <= 0 || (!gone && now - next.since < pauseAfterMs)) return kept;
    const at = new Date(now).toISOString();
    const reason = gone ? goneReason(signal.error) : pauseReason(next);
    const updated: DestinationRecord = {
      ...destination,
      health: { state: "paused", reason, since: at },
      updatedAt: at,
    };
    return {
      op: op.check(entry).set(recordKey, updated),
      result: { ...kept.result, paused: true },
    };
  });
  if (change.paused) db.formVersion.bump();
  return change;
}

/**
 * recordHealthChange in short: "paused" when this attempt paused the destination,
 * "recovered" when it was a delivery that ended a failing span, else null.
 */
export async function recordHealth(
  ...args: Parameters<typeof recordHealthChange>
): Promise<"paused" | "recovered" | null> {
  const change = await recordHealthChange(...args);
  return change.paused ? "paused" : change.cleared !== null ? "recovered" : null;
}

/**
 * Marks a failing destination's record as told to its owner; the record as it was
 * before, or null when there is none or it was told already (another process told it).
 */
export async function markFailingTold(
  db: Db,
  destinationId: string,
  now: number,
): Promise<FailingRecord | null> {
  const key = destinationFailingKey(destinationId);
  return await retryAtomic(async () => {
    const failing = await db.kv.get<FailingRecord>(key);
    if (failing.value === null || (failing.value.toldAt ?? null) !== null) {
      return { op: null, result: null };
    }
    const told = { ...failing.value, toldAt: now };
    const op = db.kv.atomic().check(failing).set(key, told, { expireIn: OUTCOME_TTL_MS });
    return { op, result: failing.value };
  });
}
