/**
 * What a notification says: a title and plain lines for email and chat (carried as the
 * envelope's fields, so the existing SMTP and chat connectors render them), and the
 * operational webhook's Standard Webhooks body (`type`, `timestamp`, `data`). Only ids,
 * counts, times, reasons and redacted error texts: never a submission's fields, never a
 * secret.
 *
 * @module
 */
import type { NotifyEventType, PendingEvent } from "../store/notifications.ts";
import type { SubmissionEnvelope } from "../submission.ts";

/** The words of each event's title. */
const TITLES: Record<NotifyEventType, string> = {
  "message.attempt.failing": "A destination is failing",
  "endpoint.disabled": "A destination was paused",
  "message.attempt.recovered": "A destination recovered",
  "message.attempt.exhausted": "Submissions failed for good",
  "tenant_key.rotated": "A tenant key was rotated",
  "summary": "Summary",
  "test": "Test notification",
};

/** What the event names, for people: field name and value. */
export function eventLines(event: PendingEvent): Record<string, string> {
  const lines: Record<string, string> = {};
  const at = (ms: number) => new Date(ms).toISOString();
  if (event.formId !== null) lines.form = event.formId;
  if (event.destinationId !== null) lines.destination = event.destinationId;
  switch (event.type) {
    case "message.attempt.failing":
      lines.what = `${event.count} failed attempt(s) in a row since ${at(event.firstAt)}; ` +
        "submissions are kept and retried";
      break;
    case "endpoint.disabled":
      lines.what = "Paused: its submissions are held until you resume it";
      if (event.held !== null) lines.held = `${event.held} submission(s) held`;
      break;
    case "message.attempt.recovered":
      lines.what = "Delivering again";
      break;
    case "message.attempt.exhausted":
      lines.what = `${event.count} submission(s) failed for good between ${at(event.firstAt)} ` +
        `and ${at(event.lastAt)}`;
      lines.submissions = event.submissionIds.join(", ") +
        (event.count > event.submissionIds.length ? " …" : "");
      break;
    case "tenant_key.rotated":
      lines.what = `${event.count} rotation(s), the last at ${at(event.lastAt)}; ` +
        "if that was not you, rotate again and check who holds the key";
      // The rotation's detail is when the earlier keys stop (its own time: at once).
      if (event.detail !== null) lines.earlierKeysStop = event.detail;
      return lines;
    case "test":
      lines.what = "A test from the notification settings: this channel works";
      break;
    case "summary":
      lines.what = `Summary of ${event.subject}`;
      for (const [name, value] of Object.entries(event.figures ?? {})) {
        lines[name] = String(value);
      }
      break;
  }
  if (event.detail !== null) {
    lines[event.type === "endpoint.disabled" ? "reason" : "lastError"] = event.detail;
  }
  return lines;
}

/** The title of a notification. */
export function eventTitle(event: PendingEvent): string {
  return `formrelay: ${TITLES[event.type]}`;
}

/** The envelope the email and chat connectors render: the title as form name, the lines as fields. */
export function notificationEnvelope(
  event: PendingEvent,
  options: { id: string; now: number },
): SubmissionEnvelope {
  return {
    submissionId: options.id,
    formId: event.formId ?? "",
    formName: eventTitle(event),
    payload: { event: event.type, ...eventLines(event) },
    metadata: {
      origin: null,
      ip: null,
      userAgent: null,
      referer: null,
      submittedAt: new Date(options.now).toISOString(),
    },
  };
}

/** The operational webhook's body (Standard Webhooks: `type`, `timestamp`, `data`). */
export function webhookBody(event: PendingEvent, now: number): Record<string, unknown> {
  return {
    type: event.type,
    timestamp: new Date(now).toISOString(),
    data: {
      orgId: event.orgId,
      formId: event.formId,
      destinationId: event.destinationId,
      count: event.count,
      firstAt: new Date(event.firstAt).toISOString(),
      lastAt: new Date(event.lastAt).toISOString(),
      submissionIds: event.submissionIds,
      ...(event.type === "endpoint.disabled" ? { reason: event.detail, held: event.held } : {}),
      ...(event.type === "summary" ? { period: event.subject, figures: event.figures ?? {} } : {}),
      ...(event.type === "tenant_key.rotated" ? { earlierKeysStop: event.detail } : {}),
      ...(event.type !== "endpoint.disabled" && event.type !== "tenant_key.rotated" &&
          event.detail !== null
        ? { lastError: event.detail }
        : {}),
    },
  };
}
