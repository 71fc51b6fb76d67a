/**
 * The MIME builder for SMTP deliveries (spec 2.5): RFC 5322 headers, RFC 2047
 * encoded-words, RFC 2045 quoted-printable bodies, CRLF line endings throughout.
 *
 * Every line it produces is 7-bit ASCII and at most 998 octets long; header values
 * cannot carry a line break, so no input can add a header. Dot-stuffing is the SMTP
 * client's job.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import type { SubmissionEnvelope } from "../../submission.ts";
import {
  cutValue,
  isTemplateFault,
  parseTemplate,
  payloadFields,
  renderTemplate,
} from "../../template.ts";

/** A message ready for the SMTP client: the envelope addresses and the content. */
export interface MailMessage {
  /** Envelope sender (MAIL FROM). */
  from: string;
  /** Envelope recipients (one RCPT TO each). */
  recipients: string[];
  /** The RFC 5322 message with CRLF line endings, not dot-stuffed. */
  data: string;
  /** The Message-ID header value, angle brackets included. */
  messageId: string;
}

/** What a message is built from. */
export interface BuildMessageOptions {
  /**
   * `plain`: Variant A, text/plain, with Reply-To from the payload's `email`.
   * `alternative`: Variant B, multipart/alternative with a form-specific From display
   * name (platformSenderName), Reply-To and metadata headers.
   */
  layout: "plain" | "alternative";
  /** Sender address: MAIL FROM and the From header's address. */
  from: string;
  to: string[];
  subjectTemplate: string;
  destinationId: string;
  /** The Date header's time; now by default. */
  date?: Date;
}

const CRLF = "\r\n";
const encoder = new TextEncoder();
const emailSchema = z.email();
const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
/** Bytes of UTF-8 per encoded-word: 52 base64 characters, 64 with the wrapper. */
const ENCODED_WORD_BYTES = 39;
const QP_LINE = 76;

/** Builds the email for one submission to one destination. */
export function buildMessage(
  envelope: SubmissionEnvelope,
  options: BuildMessageOptions,
): MailMessage {
  const messageId = stableMessageId(
    envelope.submissionId,
    options.destinationId,
    domainOf(options.from),
  );
  const subject = renderSubject(options.subjectTemplate, envelope);
  const headers: string[] = [
    header("Date", formatDate(options.date ?? new Date())),
    header("Message-ID", messageId),
  ];
  let body: string;
  if (options.layout === "plain") {
    // Reply-To as in Variant B, so the owner can answer the visitor with Reply; the body
    // keeps the spec's labelled lines (no Reply-To line there).
    const replyTo = replyToAddress(envelope.payload);
    headers.push(header("From", oneLine(options.from)));
    headers.push(addressListHeader("To", options.to));
    if (replyTo !== null) headers.push(header("Reply-To", oneLine(replyTo)));
    headers.push(textHeader("Subject", subject));
    headers.push(header("MIME-Version", "1.0"));
    headers.push(header("Content-Type", "text/plain; charset=UTF-8"));
    headers.push(header("Content-Transfer-Encoding", "quoted-printable"));
    body = encodeQuotedPrintable(plainText(envelope, null));
  } else {
    const replyTo = replyToAddress(envelope.payload);
    const name = platformSenderName(envelope.formId);
    headers.push(header("From", `${encodePhrase(name)} <${oneLine(options.from)}>`));
    headers.push(addressListHeader("To", options.to));
    if (replyTo !== null) headers.push(header("Reply-To", oneLine(replyTo)));
    headers.push(textHeader("Subject", subject));
    headers.push(textHeader("X-Formrelay-Form-Id", envelope.formId));
    headers.push(textHeader("X-Formrelay-Submission-Id", envelope.submissionId));
    headers.push(header("MIME-Version", "1.0"));
    const parts = alternativeParts(
      plainText(envelope, replyTo),
      htmlText(envelope, replyTo, subject),
    );
    headers.push(header("Content-Type", parts.contentType));
    body = parts.body;
  }
  return {
    from: options.from,
    recipients: [...options.to],
    data: headers.join(CRLF) + CRLF + CRLF + body + (body.endsWith(CRLF) ? "" : CRLF),
    messageId,
  };
}

/**
 * A multipart/alternative body of a plain text and an HTML part, both quoted-printable,
 * and the Content-Type header value that names its boundary.
 */
export function alternativeParts(
  text: string,
  html: string,
): { contentType: string; body: string } {
  // "=_" cannot occur in quoted-printable text, so the boundary never appears in a part.
  const boundary = `=_formrelay_${crypto.getRandomValues(new Uint8Array(12)).toHex()}`;
  const body = [
    `--${boundary}`,
    "Content-Type: text/plain; charset=UTF-8",
    "Content-Transfer-Encoding: quoted-printable",
    "",
    // The CRLF before a boundary belongs to the boundary (RFC 2046 5.1.1).
    encodeQuotedPrintable(text.replace(/\n$/, "")),
    `--${boundary}`,
    "Content-Type: text/html; charset=UTF-8",
    "Content-Transfer-Encoding: quoted-printable",
    "",
    encodeQuotedPrintable(html.replace(/\n$/, "")),
    `--${boundary}--`,
  ].join(CRLF);
  return { contentType: `multipart/alternative; boundary="${boundary}"`, body };
}

/**
 * The From display name of platform relay mail (Variant B): form-specific, as the spec
 * asks, but never text a tenant writes, so no form can send as "PayPal Security Team"
 * from the platform's address: `Form 3f2a9c1e via formrelay` (the form id's first eight
 * characters). The form's name stays in the subject and the body.
 */
export function platformSenderName(formId: string): string {
  return `Form ${formId.replace(/[^0-9A-Za-z]/g, "").slice(0, 8)} via formrelay`;
}

/** Longest `{{fields.NAME}}` value in a subject; the rest is cut with an ellipsis. */
export const MAX_SUBJECT_VALUE_CHARS = 200;
/** Longest subject, placeholders rendered: a mail client shows far less. */
export const MAX_SUBJECT_CHARS = 500;

/** A value in a subject: one line (the header's encoding does the rest). */
// deno-lint-ignore no-control-regex -- control characters are what is replaced here
const subjectValue = (text: string) => text.replace(/[\x00-\x1f\x7f]+/g, " ");

/**
 * The subject from its template (template.ts placeholders; `{{fields}}` as one line of
 * `name: value` pairs, cut). Values become one line; textHeader encodes the whole header,
 * so no CR or LF from the tenant or the visitor can start another header. Field values
 * are cut to MAX_SUBJECT_VALUE_CHARS and the subject to MAX_SUBJECT_CHARS, however often
 * the template names a value.
 */
export function renderSubject(template: string, envelope: SubmissionEnvelope): string {
  // Lenient: a subject stored before placeholders were checked keeps its unknown ones.
  const parsed = parseTemplate(template, { lenient: true });
  if (isTemplateFault(parsed)) return cutValue(template, MAX_SUBJECT_CHARS);
  const subject = renderTemplate(parsed, envelope, {
    escape: subjectValue,
    fieldList: () =>
      subjectValue(
        payloadFields(envelope.payload).map(([name, value]) => `${name}: ${value}`).join(", "),
      ).slice(0, 200),
    maxFieldChars: MAX_SUBJECT_VALUE_CHARS,
    maxChars: MAX_SUBJECT_CHARS,
  });
  return cutValue(subject, MAX_SUBJECT_CHARS);
}

/** The payload's top-level `email` when it is a valid address, else null. */
export function replyToAddress(payload: unknown): string | null {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return null;
  const value = (payload as Record<string, unknown>).email;
  if (typeof value !== "string") return null;
  const address = value.trim();
  // deno-lint-ignore no-control-regex -- control characters are what is removed here
  if (address.length > 254 || /[\x00-\x20\x7f]/.test(address)) return null;
  return emailSchema.safeParse(address).success ? address : null;
}

/** RFC 5322 date-time in UTC with a numeric zone: `Tue, 15 Apr 2025 10:00:00 +0000`. */
export function formatDate(date: Date): string {
  const two = (n: number) => String(n).padStart(2, "0");
  return `${DAYS[date.getUTCDay()]}, ${two(date.getUTCDate())} ${MONTHS[date.getUTCMonth()]} ` +
    `${date.getUTCFullYear()} ${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:` +
    `${two(date.getUTCSeconds())} +0000`;
}

/**
 * A Message-ID that is the same for every attempt of one submission to one
 * destination, so receivers can drop duplicates after a retry.
 */
export function stableMessageId(
  submissionId: string,
  destinationId: string,
  domain: string,
): string {
  // node:crypto's hash is synchronous: a tenth of the cost of crypto.subtle.digest here.
  const digest = createHash("sha256").update(`formrelay\n${submissionId}\n${destinationId}`)
    .digest("hex");
  return `<${digest.slice(0, 32)}@${domain}>`;
}

/**
 * Quoted-printable (RFC 2045 6.7) of the UTF-8 text; line breaks become CRLF and
 * long lines get soft breaks, so no encoded line exceeds 76 characters.
 */
export function encodeQuotedPrintable(text: string): string {
  const out: string[] = [];
  for (const line of text.split(/\r\n|\r|\n/)) {
    if (line.length <= QP_LINE && QP_LITERAL_LINE.test(line)) {
      out.push(line);
      continue;
    }
    let current = "";
    /** Appends encoded text, with a soft break before a line would pass 76 characters. */
    const append = (token: string) => {
      if (current.length + token.length > QP_LINE - 1) {
        out.push(current + "=");
        current = "";
      }
      current += token;
    };
    for (let i = 0; i < line.length;) {
      // A run of characters that stand for themselves goes in whole slices, not one by one.
      let end = i;
      while (end < line.length && isQpLiteral(line.charCodeAt(end), end === line.length - 1)) end++;
      while (i < end) {
        if (current.length >= QP_LINE - 1) {
          out.push(current + "=");
          current = "";
        }
        const take = Math.min(end - i, QP_LINE - 1 - current.length);
        current += line.slice(i, i + take);
        i += take;
      }
      if (i >= line.length) break;
      const c = line.charCodeAt(i);
      if (c < 128) {
        append(QP_ESCAPE[c]);
        i++;
      } else {
        const char = String.fromCodePoint(line.codePointAt(i)!);
        i += char.length;
        let token = "";
        for (const b of encoder.encode(char)) token += QP_ESCAPE[b];
        append(token);
      }
    }
    out.push(current);
  }
  return out.join(CRLF);
}

/** Kept as it is by quoted-printable: printable ASCII but "=", or a blank not ending a line. */
function isQpLiteral(c: number, last: boolean): boolean {
  return (c >= 33 && c <= 126 && c !== 61) || ((c === 32 || c === 9) && !last);
}

/** A line that quoted-printable leaves unchanged: printable ASCII but "=", no trailing blank. */
const QP_LITERAL_LINE = /^(?:[\x21-\x3c\x3e-\x7e \t]*[\x21-\x3c\x3e-\x7e])?$/;
const QP_ESCAPE = Array.from(
  { length: 256 },
  (_, b) => "=" + b.toString(16).toUpperCase().padStart(2, "0"),
);

/**
 * An unstructured header value (RFC 5322 2.2.1): control characters, CR and LF
 * included, become spaces; non-ASCII text, text that looks like an encoded-word
 * and overlong text become RFC 2047 encoded-words on folded lines.
 */
export function encodeHeaderText(value: string, nameLength = 0): string {
  const text = oneLine(value);
  const plain = /^[\x20-\x7e]*$/.test(text) && !text.includes("=?") &&
    nameLength + 2 + text.length <= 998;
  return plain ? text : encodeWords(text);
}

/** A display name: a quoted-string when ASCII, else encoded-words (RFC 2047 5(3)). */
export function encodePhrase(value: string): string {
  const text = oneLine(value);
  if (/^[\x20-\x7e]*$/.test(text) && !text.includes("=?") && text.length <= 900) {
    return `"${text.replace(/[\\"]/g, (c) => "\\" + c)}"`;
  }
  return encodeWords(text);
}

/** `=?UTF-8?B?...?=` words of whole characters, folded one per line. */
function encodeWords(text: string): string {
  const words: string[] = [];
  let chunk: number[] = [];
  for (const char of text) {
    const bytes = encoder.encode(char);
    if (chunk.length + bytes.length > ENCODED_WORD_BYTES) {
      words.push(`=?UTF-8?B?${new Uint8Array(chunk).toBase64()}?=`);
      chunk = [];
    }
    chunk.push(...bytes);
  }
  if (chunk.length > 0 || words.length === 0) {
    words.push(`=?UTF-8?B?${new Uint8Array(chunk).toBase64()}?=`);
  }
  return words.join(CRLF + " ");
}

/** A header whose value the caller has already made safe (folding CRLFs kept). */
function header(name: string, value: string): string {
  return `${name}: ${value}`;
}

/** A header whose value is text: RFC 2047 encoded where needed, never more than one line. */
export function textHeader(name: string, value: string): string {
  return `${name}: ${encodeHeaderText(value, name.length)}`;
}

export function addressListHeader(name: string, addresses: string[]): string {
  return `${name}: ${addresses.map(oneLine).join("," + CRLF + " ")}`;
}

/**
 * One line of text: control characters (C0, DEL and C1, whose NEL some readers break
 * at) and the Unicode line and paragraph separators become spaces.
 */
export function oneLine(value: string): string {
  // deno-lint-ignore no-control-regex -- control characters are what is removed here
  return value.replace(/[\x00-\x1f\x7f-\x9f\u2028\u2029]+/g, " ");
}

function domainOf(address: string): string {
  const domain = address.slice(address.lastIndexOf("@") + 1);
  return /^[A-Za-z0-9.-]+$/.test(domain) ? domain : "formrelay.invalid";
}

function labelledLines(
  envelope: SubmissionEnvelope,
  replyTo: string | null,
): [string, string][] {
  const lines: [string, string][] = [
    ["Form", envelope.formName],
    ["Submission ID", envelope.submissionId],
    ["Submitted At", envelope.metadata.submittedAt],
  ];
  if (replyTo !== null) lines.push(["Reply-To", replyTo]);
  lines.push(["Origin", envelope.metadata.origin ?? "(none)"]);
  lines.push(["IP", envelope.metadata.ip ?? "(none)"]);
  return lines.map(([label, value]) => [label, oneLine(value)]);
}

function payloadJson(payload: unknown): string {
  return JSON.stringify(payload ?? null, null, 2);
}

function plainText(envelope: SubmissionEnvelope, replyTo: string | null): string {
  const lines = labelledLines(envelope, replyTo).map(([label, value]) => `${label}: ${value}`);
  return [...lines, "Payload:", payloadJson(envelope.payload)].join("\n") + "\n";
}

function htmlText(envelope: SubmissionEnvelope, replyTo: string | null, subject: string): string {
  const rows = labelledLines(envelope, replyTo).map(([label, value]) =>
    `<tr><th align="left" valign="top">${escapeHtml(label)}</th><td>${escapeHtml(value)}</td></tr>`
  );
  return [
    "<!DOCTYPE html>",
    '<html><head><meta charset="utf-8">',
    `<title>${escapeHtml(oneLine(subject))}</title></head>`,
    '<body style="font-family: sans-serif">',
    "<table>",
    ...rows,
    "</table>",
    "<p><strong>Payload</strong></p>",
    `<pre>${escapeHtml(payloadJson(envelope.payload))}</pre>`,
    "</body></html>",
  ].join("\n") + "\n";
}

/** Escapes the five HTML-significant characters. */
export function escapeHtml(value: string): string {
  return value.replace(
    /[&<>"']/g,
    (c) =>
      c === "&"
        ? "&amp;"
        : c === "<"
        ? "&lt;"
        : c === ">"
        ? "&gt;"
        : c === '"'
        ? "&quot;"
        : "&#39;",
  );
}
