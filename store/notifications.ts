/**
 * Owner notifications in KV: an organization's settings (sealed: they hold addresses,
 * a webhook URL and its secret), the outbox of events waiting to be told (one entry
 * per organization, event type and subject, so events of the same kind group into
 * one message), when each was last told (so each is told at most once per grouping
 * window, found through time-ordered due entries), and the log of what was sent (the
 * jobs themselves, one per channel, are notice_jobs.ts's). No submission payload and no secret is
 * written here in plaintext: events carry ids, counts and redacted error texts.
 *
 * @module
 */
import { type Db, retryAtomic } from "./db.ts";
import {
  jobsByDestinationPrefix,
  notifyLastKey,
  notifyLogPrefix,
  notifyOutboxDueKey,
  notifyOutboxDuePrefix,
  notifyOutboxKey,
  notifySettingsKey,
  notifySettingsPrefix,
  notifySummaryKey,
  outboxKeyOfDueKey,
  outcomesOfFormPrefix,
} from "./keys.ts";
import type { DeliveryOutcome } from "./outcomes.ts";
import type { PreviousSecret } from "../connectors/signing.ts";
import { retryWhileBusy } from "./kv_busy.ts";

/** The events an owner can be told of (names in the spirit of Svix's). */
export const NOTIFY_EVENTS = [
  "message.attempt.failing",
  "endpoint.disabled",
  "message.attempt.recovered",
  "message.attempt.exhausted",
  "tenant_key.rotated",
  "summary",
  "test",
] as const;
/** One of NOTIFY_EVENTS. */
export type NotifyEventType = typeof NOTIFY_EVENTS[number];

/** Where an organization is told. */
export interface NotificationSettings {
  /**
   * Addresses, through the platform relay or one of the organization's SMTP destinations;
   * each is sent notifications only once confirmed (`confirmations`, by lower-cased
   * address: notify_confirmations.ts).
   */
  email: {
    to: string[];
    via: "platform" | string;
    confirmations?: Record<string, AddressConfirmation>;
  } | null;
  /** Ids of the organization's chat destinations. */
  chat: string[];
  /**
   * An operational webhook, signed (Standard Webhooks) when `secret` is set, and with the
   * earlier secrets a rotation keeps signing during their grace (connectors/signing.ts).
   */
  webhook: { url: string; secret: string | null; previousSecrets?: PreviousSecret[] } | null;
  /** The events told; the summary is chosen apart, a test is always sent. */
  events: Exclude<NotifyEventType, "summary" | "test">[];
  summary: "off" | "daily" | "weekly";
}

/** Where a notification address stands: pending until its link is followed. */
export interface AddressConfirmation {
  /** When the link was followed (epoch ms), or null: pending. */
  confirmedAt: number | null;
  /** When confirmation messages were sent in the last day (epoch ms), oldest first. */
  sent: number[];
  /** The SHA-256 of the link's token now good, or null (confirmed, or none sent yet). */
  tokenHash: string | null;
  /** Why the last confirmation message could not be sent, or null. */
  error: string | null;
}

/** Events of one type and subject, grouped until they are told. */
export interface PendingEvent {
  orgId: string;
  type: NotifyEventType;
  /** What it is about: a destination id, or "org". */
  subject: string;
  formId: string | null;
  destinationId: string | null;
  /** How many events were grouped (failed attempts, failed submissions, rotations). */
  count: number;
  firstAt: number;
  lastAt: number;
  /** The latest failed submissions' ids (at most MAX_IDS); never their content. */
  submissionIds: string[];
  /**
   * The last error (already redacted by the connector), the pause reason, or null: the
   * receiver's words may be in it, so only the API and the operational webhook show it.
   */
  detail: string | null;
  /** The last failure's status code (HTTP or SMTP), which people's notices give instead. */
  statusCode?: number | null;
  /** Submissions held by a paused destination, when known. */
  held: number | null;
  /** Summary figures, for the summary event only. */
  figures?: Record<string, number>;
  /** When it may be told: at once, or when the grouping window since the last one ends. */
  dueAt: number;
}

/** An event as it is recorded; grouping fills in the rest. */
export type NewEvent =
  & Pick<PendingEvent, "orgId" | "type" | "subject">
  & Partial<
    Pick<
      PendingEvent,
      "formId" | "destinationId" | "detail" | "statusCode" | "held" | "figures" | "firstAt"
    >
  >
  & { submissionIds?: string[]; count?: number };

/** A channel of an organization, as a job names it (its address or secret is read at send time). */
export type ChannelRef = { kind: "email" } | { kind: "webhook" } | {
  kind: "chat";
  destinationId: string;
};

/** One notification to send to one channel. */
export interface NotifyJob {
  id: string;
  orgId: string;
  channel: ChannelRef;
  event: PendingEvent;
  attempts: number;
  dueAt: number;
  createdAt: number;
}

/** A sent (or given up) notification, as the API lists it. */
export interface NotifyLogEntry {
  id: string;
  at: string;
  type: NotifyEventType;
  channel: ChannelRef;
  subject: string;
  count: number;
  delivered: boolean;
  attempts: number;
  error: string | null;
}

/** Most submission ids one grouped event names. */
export const MAX_IDS = 20;
/** How long a job or outbox entry lives at most (a channel failing for days gives up). */
export const JOB_TTL_MS = 3 * 24 * 3600 * 1000;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The settings of an organization that chose none. */
export function defaultSettings(summary: NotificationSettings["summary"]): NotificationSettings {
  return {
    email: null,
    chat: [],
    webhook: null,
    events: NOTIFY_EVENTS.filter((type) =>
      type !== "summary" && type !== "test"
    ) as NotificationSettings[
      "events"
    ],
    summary,
  };
}

/** An organization's settings, or null when it chose none. */
export async function getNotificationSettings(
  db: Db,
  orgId: string,
): Promise<NotificationSettings | null> {
  const entry = await db.kv.get<Uint8Array<ArrayBuffer>>(notifySettingsKey(orgId));
  if (entry.value === null) return null;
  const plain = await db.sealer.open(entry.value, `notify_settings:${orgId}`);
  return JSON.parse(decoder.decode(plain)) as NotificationSettings;
}

/** An organization's settings with the entry they were read from (for a checked update). */
export async function readNotificationSettingsEntry(
  db: Db,
  orgId: string,
): Promise<{ entry: Deno.KvEntryMaybe<unknown>; settings: NotificationSettings | null }> {
  const entry = await db.kv.get<Uint8Array<ArrayBuffer>>(notifySettingsKey(orgId));
  if (entry.value === null) return { entry, settings: null };
  const plain = await db.sealer.open(entry.value, `notify_settings:${orgId}`);
  return { entry, settings: JSON.parse(decoder.decode(plain)) as NotificationSettings };
}

/** Adds the write of an organization's settings, sealed, to `op`. */
export async function setNotificationSettings(
  db: Db,
  op: Deno.AtomicOperation,
  orgId: string,
  settings: NotificationSettings,
): Promise<void> {
  const sealed = await db.sealer.seal(
    encoder.encode(JSON.stringify(settings)),
    `notify_settings:${orgId}`,
  );
  op.set(notifySettingsKey(orgId), sealed);
}

/** Stores an organization's settings, sealed (the API's saving: notify_confirmations.ts). */
export async function putNotificationSettings(
  db: Db,
  orgId: string,
  settings: NotificationSettings,
): Promise<void> {
  const op = db.kv.atomic();
  await setNotificationSettings(db, op, orgId, settings);
  const result = await retryWhileBusy(() => op.commit());
  if (!result.ok) throw new Error("Cannot store notification settings: KV commit failed");
}

/**
 * Rewrites an organization's settings from its current ones in one read-check-commit
 * (a concurrent write makes it read again): `edit` returns the new settings and what to
 * hand back, or throws to refuse.
 */
export async function editNotificationSettings<T>(
  db: Db,
  orgId: string,
  edit: (current: NotificationSettings | null) => { settings: NotificationSettings; result: T },
): Promise<T> {
  const key = notifySettingsKey(orgId);
  return await retryAtomic(async () => {
    const entry = await db.kv.get<Uint8Array<ArrayBuffer>>(key);
    const current = entry.value === null ? null : JSON.parse(
      decoder.decode(await db.sealer.open(entry.value, `notify_settings:${orgId}`)),
    ) as NotificationSettings;
    const { settings, result } = edit(current);
    const sealed = await db.sealer.seal(
      encoder.encode(JSON.stringify(settings)),
      `notify_settings:${orgId}`,
    );
    return { op: db.kv.atomic().check(entry).set(key, sealed), result };
  });
}

/**
 * Adds an event to its group in the outbox: due at once when none of its type and
 * subject was told within `groupMs`, else when that window ends.
 */
export async function recordEvent(
  db: Db,
  event: NewEvent,
  options: { now: number; groupMs: number },
): Promise<void> {
  const { now, groupMs } = options;
  const key = notifyOutboxKey(event.orgId, event.type, event.subject);
  const lastKey = notifyLastKey(event.orgId, event.type, event.subject);
  await retryAtomic(async () => {
    const [pending, last] = await db.kv.getMany<[PendingEvent, number]>([key, lastKey]);
    const before = pending.value;
    const ids = [...(before?.submissionIds ?? [])];
    ids.push(...event.submissionIds ?? []);
    const next: PendingEvent = {
      orgId: event.orgId,
      type: event.type,
      subject: event.subject,
      formId: event.formId ?? before?.formId ?? null,
      destinationId: event.destinationId ?? before?.destinationId ?? null,
      count: (before?.count ?? 0) + (event.count ?? 1),
      // Since when: the first failed attempt when the caller knows it, else now.
      firstAt: before?.firstAt ?? event.firstAt ?? now,
      lastAt: now,
      submissionIds: ids.slice(-MAX_IDS),
      detail: event.detail ?? before?.detail ?? null,
      statusCode: event.statusCode ?? before?.statusCode ?? null,
      held: event.held ?? before?.held ?? null,
      figures: event.figures ?? before?.figures,
      dueAt: before?.dueAt ?? Math.max(now, (last.value ?? -Infinity) + groupMs),
    };
    const op = db.kv.atomic().check(pending).set(key, next, { expireIn: JOB_TTL_MS });
    // A new group's due time is fixed: its due entry is written once, with it.
    if (before === null) {
      op.set(notifyOutboxDueKey(next.dueAt, next.orgId, next.type, next.subject), 0, {
        expireIn: JOB_TTL_MS,
      });
    }
    return { op, result: undefined };
  });
}

/**
 * Outbox entries due by `now`, at most `limit`, found through their due entries (time
 * first): a pass reads what is due, not every organization's outbox. A due entry whose
 * group expired is deleted.
 */
export async function dueEvents(
  db: Db,
  options: { now: number; limit: number },
): Promise<Deno.KvEntry<PendingEvent>[]> {
  const due: Deno.KvEntry<PendingEvent>[] = [];
  const iter = db.kv.list({
    start: notifyOutboxDuePrefix(),
    end: [...notifyOutboxDuePrefix(), options.now + 1],
  }, { limit: options.limit });
  for await (const index of iter) {
    const entry = await db.kv.get<PendingEvent>(outboxKeyOfDueKey(index.key));
    if (entry.value === null) {
      await db.kv.atomic().check(index).delete(index.key).commit();
    } else if (entry.value.dueAt <= options.now) {
      due.push(entry as Deno.KvEntry<PendingEvent>);
    }
  }
  return due;
}

/** A test notification's event: told to every channel, outside the grouping. */
export function testEvent(orgId: string, now: number): PendingEvent {
  return {
    orgId,
    type: "test",
    subject: "org",
    formId: null,
    destinationId: null,
    count: 1,
    firstAt: now,
    lastAt: now,
    submissionIds: [],
    detail: null,
    held: null,
    dueAt: now,
  };
}

/** An organization's sent notifications, newest first, at most `limit`. */
export async function listNotifyLog(
  db: Db,
  orgId: string,
  limit: number,
): Promise<NotifyLogEntry[]> {
  const entries: NotifyLogEntry[] = [];
  const iter = db.kv.list<NotifyLogEntry>({ prefix: notifyLogPrefix(orgId) }, {
    reverse: true,
    limit,
  });
  for await (const entry of iter) entries.push(entry.value);
  return entries;
}

/** Claims a summary period for an organization; false when it was already queued. */
export async function claimSummary(db: Db, orgId: string, period: string): Promise<boolean> {
  const key = notifySummaryKey(orgId, period);
  const result = await retryWhileBusy(() =>
    db.kv.atomic().check({ key, versionstamp: null }).set(key, true, {
      expireIn: 9 * 24 * 3600 * 1000,
    }).commit()
  );
  return result.ok;
}

/** How many unfinished jobs a destination has (held ones when it is paused), up to `max`. */
export async function countDestinationJobs(
  db: Db,
  destinationId: string,
  max = 10_000,
): Promise<number> {
  let count = 0;
  const iter = db.kv.list({ prefix: jobsByDestinationPrefix(destinationId) }, { limit: max });
  for await (const _ of iter) count++;
  return count;
}

/**
 * A form's recorded delivery outcomes for submissions accepted in [from, to): the
 * submissions, and the deliveries by final status (summaries; never a payload).
 */
export async function countOutcomes(
  db: Db,
  formId: string,
  range: { from: number; to: number },
): Promise<{ submissions: number; delivered: number; failed: number }> {
  const prefix = outcomesOfFormPrefix(formId);
  const submissions = new Set<string>();
  let delivered = 0;
  let failed = 0;
  const iter = db.kv.list<DeliveryOutcome>({
    start: [...prefix, range.from],
    end: [...prefix, range.to],
  });
  for await (const entry of iter) {
    submissions.add(entry.value.submissionId);
    if (entry.value.status === "delivered") delivered++;
    if (entry.value.status === "failed") failed++;
  }
  return { submissions: submissions.size, delivered, failed };
}

/** Every organization's settings (for the summaries). */
export async function listNotificationSettings(
  db: Db,
): Promise<{ orgId: string; settings: NotificationSettings }[]> {
  const all: { orgId: string; settings: NotificationSettings }[] = [];
  for await (const entry of db.kv.list({ prefix: notifySettingsPrefix() })) {
    const orgId = String(entry.key[1]);
    const settings = await getNotificationSettings(db, orgId);
    if (settings !== null) all.push({ orgId, settings });
  }
  return all;
}
