/**
 * What the chat destinations (Slack, Discord, Microsoft Teams, Telegram) share: cutting
 * text to a service's limits after its escaping, the submission's fields within a budget
 * ("(N more fields)"), the small print, the config fields every chat type has (its
 * optional `template`: template.ts), and one attempt: a JSON POST through the guarded transport whose
 * answer the service's own rules read (success, refusal for rate, a webhook gone).
 *
 * @module
 */
import { urlOrigin } from "../../redact.ts";
import type { SubmissionEnvelope } from "../../submission.ts";
import {
  ELLIPSIS,
  isTemplateFault,
  parseTemplate,
  payloadFields,
  renderTemplate,
  type TemplatePart,
  type TemplateStyle,
} from "../../template.ts";
import {
  discardBody,
  type HttpConnectorDeps,
  jsonRequestHeaders,
  parseRetryAfter,
  startAttempt,
} from "../http.ts";
import type { z } from "zod";
import { type ConsoleField, redactSecrets, type SecretKind } from "../descriptor.ts";
import {
  blameOfHttpStatus,
  type Connector,
  DeliveryError,
  type DeliveryReceipt,
  type DeliveryRequest,
  type Notice,
} from "../types.ts";
import { createDigestSender, type DigestSpec } from "./digest.ts";

/** Secrets of a chat webhook config: its URL's path is the credential. */
export const CHAT_SECRETS: Record<string, SecretKind> = { url: "wholeUrl" };

/** The console's template input, the same for every chat type. */
export const TEMPLATE_FIELD: ConsoleField = {
  name: "template",
  label: "Message template",
  kind: "template",
  optional: true,
  help: "Optional, replaces the field list: {{formName}}, {{submissionId}}, {{submittedAt}}, " +
    "{{origin}}, {{fields.NAME}} and {{fields}} (the list) are replaced; values are escaped.",
};

/**
 * The presentation fields of an unsaved config (template, sender name, chat), for a
 * preview: anything of another type is left out.
 */
export function presentation(config: Record<string, unknown>) {
  const text = (value: unknown) => typeof value === "string" && value !== "" ? value : undefined;
  const chatId = typeof config.chatId === "number" ? config.chatId : text(config.chatId) ?? 0;
  return { template: text(config.template), username: text(config.username), chatId };
}

/** The last template parsed, kept: a digest renders one template for each submission. */
let lastParsed: { template: string; parts: TemplatePart[] } | null = null;

/** The parts of a valid template (the config was validated before delivery). */
export function templateParts(template: string | undefined): TemplatePart[] | null {
  if (template === undefined) return null;
  if (lastParsed?.template !== template) {
    const parsed = parseTemplate(template);
    lastParsed = { template, parts: isTemplateFault(parsed) ? [{ text: template }] : parsed };
  }
  return lastParsed.parts;
}

/**
 * The longest start of `raw` whose escaped form, with an ellipsis when cut, is at most
 * `max` characters (`escape` may grow text, `&` → `&amp;`, never shorten it), never
 * splitting a surrogate pair or an escape sequence. Only about `max` characters of `raw`
 * are ever escaped, however long it is.
 */
export function cutEscaped(raw: string, max: number, escape: (text: string) => string): string {
  if (raw.length <= max) {
    const whole = escape(raw);
    if (whole.length <= max) return whole;
  }
  let end = Math.min(raw.length, max);
  for (;;) {
    if (end > 0 && /[\uD800-\uDBFF]/.test(raw[end - 1])) end--;
    const cut = escape(raw.slice(0, end)) + ELLIPSIS;
    if (cut.length <= max || end === 0) return end === 0 ? ELLIPSIS.slice(0, max) : cut;
    end -= Math.max(1, Math.ceil((cut.length - max) / 5));
  }
}

/** Plain cutting: the escape that changes nothing. */
export const cut = (raw: string, max: number) => cutEscaped(raw, max, (text) => text);

/** "(N more fields)" */
export function moreFields(count: number): string {
  return `(${count} more field${count === 1 ? "" : "s"})`;
}

/** The small print under a message: when it was submitted, and from which site. */
export function smallPrint(envelope: SubmissionEnvelope): string {
  const origin = envelope.metadata.origin;
  return `Submitted ${envelope.metadata.submittedAt}${origin ? ` from ${origin}` : ""}`;
}

/** One field as a chat message shows it. */
export interface ShownField {
  name: string;
  value: string;
}

/**
 * The payload's fields, each name and value cut and escaped, as many as `fits` accepts
 * in order; the rest are counted.
 */
export function fieldsWithin(
  envelope: SubmissionEnvelope,
  limits: { maxName: number; maxValue: number; escape: (text: string) => string },
  fits: (field: ShownField, index: number) => boolean,
): { shown: ShownField[]; more: number } {
  const all = payloadFields(envelope.payload);
  const shown: ShownField[] = [];
  for (const [name, value] of all) {
    const field = {
      name: cutEscaped(name, limits.maxName, limits.escape),
      value: cutEscaped(value, limits.maxValue, limits.escape),
    };
    if (!fits(field, shown.length)) break;
    shown.push(field);
  }
  return { shown, more: all.length - shown.length };
}

/**
 * A field list as text: `line(name, value)` for as many fields as `room` characters hold
 * (names and values cut and escaped), then "(N more fields)"; lines joined by `separator`
 * (a line break by default). What `{{fields}}` shows in a template.
 */
export function fieldList(
  envelope: SubmissionEnvelope,
  options: {
    maxName: number;
    maxValue: number;
    escape: (text: string) => string;
    line: (name: string, value: string) => string;
    room: number;
    separator?: string;
  },
): string {
  const { line } = options;
  let room = options.room;
  const { shown, more } = fieldsWithin(envelope, options, (field) => {
    room -= line(field.name, field.value).length + 1;
    return room >= 0;
  });
  const lines = shown.map((field) => line(field.name, field.value));
  if (more > 0) lines.push(moreFields(more));
  return lines.join(options.separator ?? "\n");
}

/**
 * Renders a config's template for an envelope within `style.maxChars` (cut at a line
 * break, never inside a tag or an escape, with an ellipsis), or null when it has none.
 * Field values are cut to `style.maxFieldChars` before escaping and rendering stops at
 * the limit (template.ts), so the cost is bounded by the limit, not by the template.
 */
export function renderConfigTemplate(
  template: string | undefined,
  envelope: SubmissionEnvelope,
  style: TemplateStyle,
): string | null {
  const parts = templateParts(template);
  return parts === null ? null : cutMarkup(renderTemplate(parts, envelope, style), style.maxChars);
}

/** How a service's answer reads: a receipt, or a DeliveryError to throw. */
export type ChatAnswer = DeliveryReceipt | DeliveryError;

/** What a service answered: status, headers and (a bounded start of) its body. */
export interface ChatResponse {
  status: number;
  headers: Headers;
  body: string;
}

/** Most bytes of a service's answer read: its error texts are short. */
const MAX_ANSWER_CHARS = 4096;

/** Reads at most MAX_ANSWER_CHARS of an answer's body; the rest is discarded. */
async function readAnswer(response: Response): Promise<string> {
  if (response.body === null) return "";
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  try {
    while (text.length < MAX_ANSWER_CHARS) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
  return text.slice(0, MAX_ANSWER_CHARS);
}

/**
 * A service's short error word or sentence, when it looks like one (`channel_not_found`,
 * "Unknown Webhook", "Forbidden: bot was blocked by the user"); never anything longer or
 * stranger, which could echo what was sent.
 */
export function serviceWords(text: unknown): string | null {
  if (typeof text !== "string") return null;
  const trimmed = text.trim();
  return /^[\w .,:;'()-]{1,160}$/.test(trimmed) ? trimmed : null;
}

/**
 * A failure read from a service's answer: 429 and 5xx transient (waiting its
 * Retry-After), `gone` answers transient too (the destination is paused at once and
 * this submission held), anything else permanent, blamed as HTTP statuses are.
 */
export function chatFailure(
  url: URL,
  response: ChatResponse,
  options: { words?: string | null; gone?: boolean; retryAfterMs?: number } = {},
): DeliveryError {
  const { status } = response;
  const words = options.words ? `: ${options.words}` : "";
  const transient = status === 408 || status === 429 || status >= 500 || options.gone === true;
  const retryAfterMs = options.retryAfterMs ??
    (transient ? parseRetryAfter(response.headers.get("retry-after")) : undefined);
  // A 429 is a refusal for rate: the destination's pace holds its queue (delivery/pace.ts).
  const pace = status === 429
    ? { limited: true, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) }
    : undefined;
  return new DeliveryError(`Cannot deliver to "${urlOrigin(url)}": ${status}${words}`, {
    permanent: !transient,
    blame: options.gone ? "destination" : blameOfHttpStatus(status),
    statusCode: status,
    retryAfterMs,
    gone: options.gone,
    pace,
  });
}

/** What makes one chat service's connector. */
export interface ChatServiceSpec<C> {
  schema: z.ZodType<C>;
  secrets: Record<string, SecretKind>;
  /** Where a config's messages go. */
  url(config: C): URL;
  /** The service's message of one submission. */
  message(envelope: SubmissionEnvelope, config: C): unknown;
  /** The service's message of several submissions (a digest: "5 new submissions to …"). */
  digest(envelopes: SubmissionEnvelope[], config: C): unknown;
  /** The service's message of an owner notice: titled by its event, never a submission's. */
  notice(notice: Notice, config: C): unknown;
  /** How the service's messages are paced and joined (digest.ts). */
  pace: Pick<DigestSpec, "maxPerMessage" | "minGapMs">;
  /** The service's rules for its answers. */
  read(url: URL, response: ChatResponse): ChatAnswer;
}

/** A chat service's connector: its message posted as JSON, its answers read by its rules. */
export function createChatConnector<C>(
  deps: HttpConnectorDeps,
  spec: ChatServiceSpec<C>,
): Connector<C> {
  const sender = createDigestSender({
    ...spec.pace,
    // Within one attempt's time-out, so a waiting delivery never outlives its attempt.
    maxWaitMs: Math.max(1000, Math.floor(deps.timeoutMs * 2 / 3)),
    send: (envelopes, config, signal) =>
      sendChatMessage({
        deps,
        url: spec.url(config as C),
        body: envelopes.length === 1
          ? spec.message(envelopes[0], config as C)
          : spec.digest(envelopes, config as C),
        signal,
        read: spec.read,
      }),
  });
  return {
    configSchema: spec.schema,
    redact: (config) => redactSecrets(config, spec.secrets),
    deliver: (request) => sender.deliver(request as DeliveryRequest<unknown>),
    // A notice is posted on its own, past the digest of submissions.
    notice: {
      sendNotice: async (config, { notice, signal }) =>
        (await sendChatMessage({
          deps,
          url: spec.url(config),
          body: spec.notice(notice, config),
          signal,
          read: spec.read,
        })).receipt,
    },
  };
}

/**
 * One submission of a digest as text: its template, or its `name: value` lines, cut
 * to `maxChars` with "(N more fields)" when fields were left out.
 */
export function digestPart(
  envelope: SubmissionEnvelope,
  options: {
    template: string | undefined;
    escape: (text: string) => string;
    line: (name: string, value: string) => string;
    maxChars: number;
  },
): string {
  const { escape, line, maxChars } = options;
  const list = () =>
    fieldList(envelope, { maxName: 100, maxValue: 300, escape, line, room: maxChars - 30 });
  const rendered = renderConfigTemplate(options.template, envelope, {
    escape,
    fieldList: list,
    maxFieldChars: maxChars,
    maxChars,
  });
  return rendered ?? cutMarkup(list(), maxChars);
}

/** A notice's lines as one text: escaped, cut to `maxChars`. */
export function noticeText(notice: Notice, escape: (text: string) => string, maxChars: number) {
  return cutEscaped(notice.lines.join("\n"), maxChars, escape);
}

/** The title of a digest: "5 new submissions to Contact". */
export function digestTitle(envelopes: SubmissionEnvelope[]): string {
  return `${envelopes.length} new submissions to ${envelopes[0].formName}`;
}

/** What a chat connector needs: the HTTP deps and how its service's answers read. */
export interface ChatSend {
  deps: HttpConnectorDeps;
  url: URL;
  body: unknown;
  signal: AbortSignal;
  /** The service's rules: a receipt for success, else the failure. */
  read(url: URL, response: ChatResponse): ChatAnswer;
}

/** One attempt: the message as JSON, the answer read by the service's rules. */
export async function sendChatMessage(
  send: ChatSend,
): Promise<{ receipt: DeliveryReceipt; holdMs: number }> {
  const post = startAttempt(send.deps, send.signal);
  const response = await post(send.url, {
    method: "POST",
    headers: jsonRequestHeaders(),
    body: JSON.stringify(send.body),
  });
  let body: string;
  try {
    body = await readAnswer(response);
  } catch {
    await discardBody(response);
    body = "";
  }
  const answer = send.read(send.url, { status: response.status, headers: response.headers, body });
  if (answer instanceof DeliveryError) throw answer;
  return { receipt: answer, holdMs: quotaHoldMs(response.headers) };
}

/**
 * How long a service's quota headers say to wait before the next message: the time to
 * the reset when `X-RateLimit-Remaining` is 0 (Discord's per-webhook buckets), else 0.
 */
export function quotaHoldMs(headers: Headers): number {
  if (headers.get("x-ratelimit-remaining")?.trim() !== "0") return 0;
  const seconds = Number(headers.get("x-ratelimit-reset-after") ?? NaN);
  // At most a minute: a bucket resets within seconds; anything longer is not believed.
  return Number.isFinite(seconds) && seconds > 0 ? Math.min(Math.ceil(seconds * 1000), 60_000) : 0;
}

/** A JSON answer's object, or an empty one. */
export function answerJson(body: string): Record<string, unknown> {
  try {
    const value = JSON.parse(body);
    return typeof value === "object" && value !== null ? value : {};
  } catch {
    return {};
  }
}

/**
 * Where to cut escaped or marked-up text to keep at most `max` characters: at a line
 * break in the second half, else a space, else before a tag (`<…>`) or an escape
 * (`&…;`) the cut would split, never inside a surrogate pair.
 */
function cutPoint(text: string, max: number): number {
  let end = text.lastIndexOf("\n", max);
  if (end < max / 2) end = text.lastIndexOf(" ", max);
  if (end >= max / 2) return end;
  end = max;
  const head = text.slice(0, end);
  if (head.lastIndexOf("<") > head.lastIndexOf(">")) end = head.lastIndexOf("<");
  else if (head.lastIndexOf("&") > head.lastIndexOf(";")) end = head.lastIndexOf("&");
  if (/[\uD800-\uDBFF]/.test(text[end - 1] ?? "")) end--;
  return end;
}

/** Splits escaped text into pieces of at most `max` characters (see cutPoint). */
export function chunkText(text: string, max: number): string[] {
  const chunks: string[] = [];
  let rest = text;
  while (rest.length > max) {
    const end = Math.max(1, cutPoint(rest, max));
    chunks.push(rest.slice(0, end));
    rest = rest.slice(end).replace(/^[ \n]/, "");
  }
  if (rest !== "") chunks.push(rest);
  return chunks;
}

/** Escaped or marked-up text cut to at most `max` characters, ending with an ellipsis when cut. */
export function cutMarkup(text: string, max: number): string {
  return text.length <= max ? text : text.slice(0, cutPoint(text, max - 1)) + ELLIPSIS;
}
