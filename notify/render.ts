/**
 * What a notification says: a notice (connectors/types.ts) with a title and lines for
 * people, which the email and chat connectors render their own way, and the operational
 * webhook's Standard Webhooks body (`type`, `timestamp`, `data`), unchanged. People's
 * words are formrelay's: the form and destination by name, what happened, since when
 * (the first failed attempt), what is kept, held or lost, the status code and host, and
 * a link to the console; never a receiver's reply text, a submission's fields or a
 * secret. The webhook's data keeps the redacted error text for machines, as the API does.
 *
 * @module
 */
import type { Notice } from "../connectors/types.ts";
import type { NotifyEventType, PendingEvent } from "../store/notifications.ts";

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

/** What a notice names, read at send time: the form's and destination's names for people. */
export interface NoticeContext {
  formName: string | null;
  /** The destination for people: its name, or its type and host ("Webhook to hooks.example.com"). */
  destination: string | null;
  /** The destination's type, which says how its status codes read (HTTP or SMTP). */
  destinationType: string | null;
  /** The console's address (PUBLIC_URL), or null: no link. */
  consoleUrl: string | null;
  now: number;
}

/** A time for people: `2026-11-27 14:15:57 UTC`. */
function when(ms: number): string {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

/**
 * formrelay's own words for why a destination failed, from the status code alone: the
 * receiver's reply text never reaches an owner's mail or chat (it may be anyone's words,
 * a phishing link included); it stays in the console, the sent list and the API.
 */
export function reasonWords(statusCode: number | null, type: string | null): string {
  if (statusCode === null) {
    return "no answer: the connection failed or the receiver did not answer in time";
  }
  if (type === "smtp") {
    return statusCode >= 500
      ? `the mail server refused the message (SMTP ${statusCode}, permanent)`
      : `the mail server refused the message for now (SMTP ${statusCode}, temporary)`;
  }
  if (statusCode === 401 || statusCode === 403) {
    return `the receiver refused access (HTTP ${statusCode}): check the address and its credentials`;
  }
  if (statusCode === 404 || statusCode === 410) {
    return `the receiver says the address does not exist (HTTP ${statusCode})`;
  }
  if (statusCode === 408) return "the receiver timed out (HTTP 408)";
  if (statusCode === 429) return "the receiver asked to slow down (HTTP 429)";
  if (statusCode >= 500) return `the receiver had an error of its own (HTTP ${statusCode})`;
  return `the receiver refused the request (HTTP ${statusCode})`;
}

/** The console page a notice links to. */
function consolePage(event: PendingEvent): { label: string; hash: string } {
  if (event.formId !== null && event.type === "message.attempt.exhausted") {
    return { label: "See the failed deliveries", hash: `#/forms/${event.formId}/deliveries` };
  }
  if (event.formId !== null) {
    return { label: "See the destination", hash: `#/forms/${event.formId}/destinations` };
  }
  if (event.type === "tenant_key.rotated") return { label: "See your keys", hash: "#/key" };
  return { label: "See the notification settings", hash: "#/notifications" };
}

/** What happened, and what is kept, held or lost: one line each. */
function whatLines(event: PendingEvent, context: NoticeContext): string[] {
  const reason = `Reason: ${reasonWords(event.statusCode ?? null, context.destinationType)}.`;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  switch (event.type) {
    case "message.attempt.failing":
      return [
        `What happened: ${plural(event.count, "delivery attempt")} in a row failed, ` +
        `failing since ${when(event.firstAt)}.`,
        reason,
        "What is kept: every submission is kept and retried; nothing is lost yet.",
      ];
    case "endpoint.disabled":
      return [
        `What happened: formrelay paused it (failing since ${when(event.firstAt)}).`,
        reason,
        `What is held: ${
          event.held === null ? "its submissions" : plural(event.held, "submission")
        }, kept until you resume it.`,
      ];
    case "message.attempt.recovered":
      return ["What happened: it delivers again."];
    case "message.attempt.exhausted":
      return [
        `What happened: ${plural(event.count, "submission")} failed for good between ` +
        `${when(event.firstAt)} and ${when(event.lastAt)}, after every retry.`,
        reason,
        "What is lost: they were not delivered to this destination; redeliver them from " +
        "the console while they are kept.",
        `Submissions: ${event.submissionIds.join(", ")}` +
        (event.count > event.submissionIds.length ? " …" : ""),
      ];
    case "tenant_key.rotated":
      return [
        `What happened: ${plural(event.count, "rotation")}, the last at ${when(event.lastAt)}.`,
        // The rotation's detail is when the earlier keys stop (its own time: at once).
        ...(event.detail === null
          ? []
          : [`The earlier keys stop: ${when(Date.parse(event.detail))}.`]),
        "If that was not you, rotate again and check who holds the key.",
      ];
    case "test":
      return ["A test from the notification settings: this channel works."];
    case "summary":
      return [
        `Summary of ${event.subject.replace(/^(daily|weekly):/, "")}:`,
        ...Object.entries(event.figures ?? {}).map(([name, value]) => `${name}: ${value}`),
      ];
  }
}

/** The title of a notification's event. */
export function eventTitle(event: PendingEvent): string {
  return `formrelay: ${TITLES[event.type]}`;
}

/** An event as a notice (connectors/types.ts): formrelay's words, and its data for machines. */
export function noticeOf(event: PendingEvent, context: NoticeContext): Notice {
  const about = context.destination ?? event.destinationId;
  const form = context.formName ?? event.formId;
  const title = eventTitle(event) +
    (about === null ? "" : `: ${about}`) + (form === null ? "" : ` (form ${form})`);
  const lines = [
    ...(form === null ? [] : [`Form: ${form}`]),
    ...(about === null ? [] : [`Destination: ${about}`]),
    ...whatLines(event, context),
  ];
  const page = consolePage(event);
  return {
    event: event.type,
    title,
    lines,
    link: context.consoleUrl === null
      ? null
      : { label: page.label, url: `${context.consoleUrl}/${page.hash}` },
    data: webhookBody(event, context.now),
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
