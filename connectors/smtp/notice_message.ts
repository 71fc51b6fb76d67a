/**
 * The MIME message of an owner notice (connectors/types.ts Notice): plain text and HTML
 * (multipart/alternative), the title as subject, the lines, and the console link. Only
 * formrelay's words: a notice carries no receiver's reply and no submission's field. It
 * is an automatic message (RFC 3834 `Auto-Submitted: auto-generated`), so responders
 * do not answer it.
 *
 * @module
 */
import type { Notice } from "../types.ts";
import {
  addressListHeader,
  alternativeParts,
  encodePhrase,
  escapeHtml,
  formatDate,
  type MailMessage,
  oneLine,
  stableMessageId,
  textHeader,
} from "./message.ts";

const CRLF = "\r\n";

/** Builds a notice's message; `platform`: sent through the platform relay (formrelay's sender name). */
export function buildNoticeMessage(
  notice: Notice,
  options: { id: string; from: string; to: string[]; platform: boolean; date?: Date },
): MailMessage {
  const domain = /^[A-Za-z0-9.-]+$/.test(options.from.split("@")[1] ?? "")
    ? options.from.split("@")[1]
    : "formrelay.invalid";
  const messageId = stableMessageId(options.id, "notice", domain);
  const from = options.platform
    ? `${encodePhrase("formrelay")} <${oneLine(options.from)}>`
    : oneLine(options.from);
  const text = [
    notice.title,
    "",
    ...notice.lines,
    ...(notice.link === null ? [] : ["", `${notice.link.label}: ${notice.link.url}`]),
  ].join("\n") + "\n";
  const html = [
    "<!DOCTYPE html>",
    '<html><head><meta charset="utf-8">',
    `<title>${escapeHtml(oneLine(notice.title))}</title></head>`,
    '<body style="font-family: sans-serif">',
    `<h2>${escapeHtml(notice.title)}</h2>`,
    ...notice.lines.map((line) => `<p>${escapeHtml(line)}</p>`),
    ...(notice.link === null
      ? []
      : [`<p><a href="${escapeHtml(notice.link.url)}">${escapeHtml(notice.link.label)}</a></p>`]),
    "</body></html>",
  ].join("\n") + "\n";
  const parts = alternativeParts(text, html);
  const headers = [
    `Date: ${formatDate(options.date ?? new Date())}`,
    `Message-ID: ${messageId}`,
    `From: ${from}`,
    addressListHeader("To", options.to),
    textHeader("Subject", notice.title),
    "Auto-Submitted: auto-generated",
    "X-Auto-Response-Suppress: All",
    textHeader("X-Formrelay-Event", notice.event),
    "MIME-Version: 1.0",
    `Content-Type: ${parts.contentType}`,
  ];
  return {
    from: options.from,
    recipients: [...options.to],
    data: headers.join(CRLF) + CRLF + CRLF + parts.body + CRLF,
    messageId,
  };
}
