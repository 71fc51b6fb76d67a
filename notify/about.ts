/**
 * What a notice is about, for people, read at send time: the form's name and the
 * destination's (the tenant's name for it, or its type and host), so an owner reads
 * "Webhook to hooks.example.com (form Contact)" rather than two UUIDs.
 *
 * @module
 */
import { describeTarget, descriptorOf } from "../connectors/registry.ts";
import type { Db } from "../store/db.ts";
import { getDestination } from "../store/destinations.ts";
import { getFormById } from "../store/forms.ts";
import type { PendingEvent } from "../store/notifications.ts";
import type { NoticeContext } from "./render.ts";

/** The host a destination's config sends to, or null. */
function hostOf(type: string, config: unknown): string | null {
  const target = describeTarget(type, config);
  if (target === null) return null;
  if ("relay" in target) return target.relay === "platform" ? "the platform relay" : target.relay;
  return URL.canParse(target.url) ? new URL(target.url).host : null;
}

/** The form and destination an event names, as people know them (null where it names none or they are gone). */
export async function aboutOf(
  db: Db,
  event: PendingEvent,
): Promise<Pick<NoticeContext, "formName" | "destination" | "destinationType">> {
  if (event.formId === null) return { formName: null, destination: null, destinationType: null };
  const form = await getFormById(db, event.formId);
  const record = event.destinationId === null
    ? null
    : await getDestination(db, event.formId, event.destinationId);
  if (record === null) {
    return { formName: form?.name ?? null, destination: null, destinationType: null };
  }
  const label = descriptorOf(record.type).label;
  const host = record.name ? null : hostOf(record.type, record.config);
  const destination = record.name
    ? `${label} "${record.name}"`
    : host === null
    ? label
    : `${label} to ${host}`;
  return { formName: form?.name ?? null, destination, destinationType: record.type };
}
