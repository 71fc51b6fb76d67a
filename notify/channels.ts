/**
 * An organization's notification channels: which ones an event goes to (never the
 * destination it is about: a channel that fails is not told about itself; email only to
 * addresses whose owner followed the confirmation link), and what a
 * channel is at send time (a destination type and config the existing connectors send
 * with: SMTP through the platform relay or one of the organization's SMTP destinations'
 * relay, one of its chat destinations, or the operational webhook).
 *
 * @module
 */
import type { DestinationType } from "../connectors/registry.ts";
import { type DestinationRecord, openDestinationConfig } from "../store/destinations.ts";
import { listDestinationRecords } from "../store/destinations.ts";
import type { Db } from "../store/db.ts";
import { listForms } from "../store/forms.ts";
import { confirmedAddresses } from "../store/notify_confirmations.ts";
import type { ChannelRef, NotificationSettings, PendingEvent } from "../store/notifications.ts";

/** The destination types a chat channel may be. */
export const CHAT_TYPES: readonly DestinationType[] = ["slack", "discord", "teams", "telegram"];

/** One of an organization's destinations by id, or null. */
export async function findOrgDestination(
  db: Db,
  orgId: string,
  destinationId: string,
): Promise<DestinationRecord | null> {
  for (const form of await listForms(db, orgId)) {
    for (const record of await listDestinationRecords(db, form.id)) {
      if (record.id === destinationId) return record;
    }
  }
  return null;
}

/** The channels an event goes to: every chosen one, except a destination it is about. */
export function channelsFor(
  settings: NotificationSettings | null,
  event: PendingEvent,
): ChannelRef[] {
  if (settings === null) return [];
  const wanted = event.type === "test" ||
    (event.type === "summary" ? settings.summary !== "off" : settings.events.includes(event.type));
  if (!wanted) return [];
  const about = event.destinationId;
  const channels: ChannelRef[] = [];
  // Email goes to confirmed addresses only: none confirmed, no email channel.
  if (
    settings.email !== null && settings.email.via !== about &&
    confirmedAddresses(settings.email).length > 0
  ) {
    channels.push({ kind: "email" });
  }
  for (const destinationId of settings.chat) {
    if (destinationId !== about) channels.push({ kind: "chat", destinationId });
  }
  if (settings.webhook !== null) channels.push({ kind: "webhook" });
  return channels;
}

/** What a channel sends with now, or why it cannot. */
export type ChannelTarget =
  | { ok: true; type: DestinationType; config: unknown }
  | { ok: false; error: string };

/** A subject template the SMTP config requires; a notice's subject is its own title. */
const SUBJECT = "{{formName}}";

/** Resolves a channel against the organization's current settings and destinations. */
export async function channelTarget(
  db: Db,
  options: { orgId: string; channel: ChannelRef; settings: NotificationSettings | null },
): Promise<ChannelTarget> {
  const { orgId, channel, settings } = options;
  if (settings === null) return { ok: false, error: "Notifications were turned off" };
  if (channel.kind === "webhook") {
    if (settings.webhook === null) return { ok: false, error: "The webhook was removed" };
    const { url, secret, previousSecrets } = settings.webhook;
    // Earlier secrets in their grace sign too (connectors/signing.ts).
    const signing = secret ? { secret, ...(previousSecrets ? { previousSecrets } : {}) } : {};
    const config = { url, method: "POST", headers: {}, ...signing };
    return { ok: true, type: "webhook", config };
  }
  if (channel.kind === "email") {
    if (settings.email === null) return { ok: false, error: "The email addresses were removed" };
    const { via } = settings.email;
    const to = confirmedAddresses(settings.email);
    if (to.length === 0) return { ok: false, error: "No email address is confirmed" };
    if (via === "platform") {
      return { ok: true, type: "smtp", config: { to, subjectTemplate: SUBJECT } };
    }
    const record = await findOrgDestination(db, orgId, via);
    if (record === null || record.type !== "smtp") {
      return { ok: false, error: "The SMTP destination to send through was deleted" };
    }
    const relay = await openDestinationConfig(db, record) as Record<string, unknown>;
    return { ok: true, type: "smtp", config: { ...relay, to, subjectTemplate: SUBJECT } };
  }
  if (!settings.chat.includes(channel.destinationId)) {
    return { ok: false, error: "The chat destination is no longer chosen" };
  }
  const record = await findOrgDestination(db, orgId, channel.destinationId);
  if (record === null || !CHAT_TYPES.includes(record.type)) {
    return { ok: false, error: "The chat destination was deleted" };
  }
  return { ok: true, type: record.type, config: await openDestinationConfig(db, record) };
}
