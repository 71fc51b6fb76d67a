/**
 * The MIME message of a confirmation to a visitor (rules/confirmation.ts): plain text
 * only, so echoed visitor text can carry no markup; every header one line; and the
 * headers RFC 3834 asks of an automatic response, so that mail systems and
 * out-of-office responders do not answer it in turn. The `To` header is the one line
 * that may not be ASCII: a visitor's local part such as `josé` (RFC 6532), which the
 * SMTP client sends only with SMTPUTF8.
 *
 * @module
 */
import {
  encodePhrase,
  encodeQuotedPrintable,
  formatDate,
  type MailMessage,
  oneLine,
  platformSenderName,
  stableMessageId,
  textHeader,
} from "./message.ts";

/** What a confirmation is made of; subject and text already rendered. */
export interface ConfirmationMessage {
  formId: string;
  submissionId: string;
  /** Sender address (MAIL FROM and From). */
  from: string;
  /** Through the platform relay: From gets the platform's form-specific display name. */
  platform: boolean;
  to: string;
  replyTo: string | null;
  subject: string;
  text: string;
  /** Echoed fields, names and values already cut. */
  echoed: [name: string, value: string][];
  date?: Date;
}

const CRLF = "\r\n";

/** Builds a confirmation's message. */
export function buildConfirmationMessage(mail: ConfirmationMessage): MailMessage {
  const domain = /^[A-Za-z0-9.-]+$/.test(mail.from.split("@")[1] ?? "")
    ? mail.from.split("@")[1]
    : "formrelay.invalid";
  const messageId = stableMessageId(mail.submissionId, "confirmation", domain);
  const from = mail.platform
    ? `${encodePhrase(platformSenderName(mail.formId))} <${oneLine(mail.from)}>`
    : oneLine(mail.from);
  const headers = [
    `Date: ${formatDate(mail.date ?? new Date())}`,
    `Message-ID: ${messageId}`,
    `From: ${from}`,
    `To: ${oneLine(mail.to)}`,
    ...(mail.replyTo === null ? [] : [`Reply-To: ${oneLine(mail.replyTo)}`]),
    textHeader("Subject", mail.subject),
    // RFC 3834 section 5: an automatic response to a message (here: to a form post).
    "Auto-Submitted: auto-replied",
    // Microsoft Exchange's equivalent: no out-of-office or delivery reports in return.
    "X-Auto-Response-Suppress: All",
    textHeader("X-Formrelay-Form-Id", mail.formId),
    textHeader("X-Formrelay-Submission-Id", mail.submissionId),
    "MIME-Version: 1.0",
    "Content-Type: text/plain; charset=UTF-8",
    "Content-Transfer-Encoding: quoted-printable",
  ];
  let body = mail.text.replace(/\r\n?/g, "\n");
  if (mail.echoed.length > 0) {
    body += "\n\n" + mail.echoed.map(([name, value]) => `${name}: ${value}`).join("\n");
  }
  return {
    from: mail.from,
    recipients: [mail.to],
    data: headers.join(CRLF) + CRLF + CRLF + encodeQuotedPrintable(body + "\n"),
    messageId,
  };
}
