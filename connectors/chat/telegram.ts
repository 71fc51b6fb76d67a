/**
 * Telegram through the Bot API's `sendMessage` (`TELEGRAM_API_URL`): the submission as
 * HTML text (the form's name in bold, `name: value` lines, the small print in italics)
 * with every value escaped, so tags or markdown in a payload are text. At most 4 096
 * characters whatever was sent; link previews off.
 *
 * @module
 */
import { z } from "zod";
import type { SubmissionEnvelope } from "../../submission.ts";
import type { SecretKind } from "../descriptor.ts";
import type { Notice } from "../types.ts";
import { CHAT_WEBHOOK_FIELDS, chatDestination } from "./destination.ts";
import * as chat from "./common.ts";

/** Telegram destination config. */
export const telegramConfigSchema = z.strictObject({
  botToken: z.string().regex(
    /^\d{1,20}:[A-Za-z0-9_-]{20,100}$/,
    'Expected the token BotFather gave: digits, ":" and 35 letters, e.g. "123456:ABC-DEF…"',
  ),
  chatId: z.union([
    z.number().int(),
    z.string().regex(
      /^(@[A-Za-z][A-Za-z0-9_]{3,}|-?\d{1,20})$/,
      'Enter the chat id (a number) or "@channel"',
    ),
  ]),
  template: CHAT_WEBHOOK_FIELDS.template,
});

export type TelegramConfig = z.infer<typeof telegramConfigSchema>;

const TELEGRAM_SECRETS: Record<string, SecretKind> = { botToken: "value" };

/** Longest message text. */
export const TELEGRAM_MAX_CHARS = 4096;

/** Escapes text for `parse_mode: HTML`. */
export function telegramEscape(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

/** The `sendMessage` body of one submission. */
export function telegramMessage(
  envelope: SubmissionEnvelope,
  config: Pick<TelegramConfig, "chatId" | "template">,
) {
  const title = `<b>${chat.cutEscaped(envelope.formName, 300, telegramEscape)}</b>`;
  const footer = `<i>${telegramEscape(chat.smallPrint(envelope))}</i>`;
  // Room for the title, the small print and a "(N more fields)" line.
  let budget = TELEGRAM_MAX_CHARS - title.length - footer.length - 40;
  const lines = (maxValue: number, fits: (size: number) => boolean) => {
    const { shown, more } = chat.fieldsWithin(
      envelope,
      { maxName: 100, maxValue, escape: telegramEscape },
      (field) => fits(field.name.length + field.value.length + 10),
    );
    const list = shown.map(({ name, value }) => `<b>${name}:</b> ${value}`);
    if (more > 0) list.push(chat.moreFields(more));
    return list.join("\n");
  };
  const fitsBudget = (size: number) => {
    if (size > budget) return false;
    budget -= size;
    return true;
  };
  const rendered = chat.renderConfigTemplate(config.template, envelope, {
    escape: telegramEscape,
    fieldList: () => lines(300, fitsBudget),
    maxFieldChars: budget,
    maxChars: budget,
  });
  const text = rendered ?? lines(1000, fitsBudget);
  return {
    chat_id: config.chatId,
    text: `${title}\n\n${text}\n\n${footer}`,
    parse_mode: "HTML",
    link_preview_options: { is_disabled: true },
  };
}

/** The `sendMessage` body of an owner notice: its title, its lines and the console link. */
export function telegramNotice(notice: Notice, config: Pick<TelegramConfig, "chatId">) {
  const title = `<b>${chat.cutEscaped(notice.title, 300, telegramEscape)}</b>`;
  const link = notice.link === null
    ? ""
    : `\n\n<a href="${telegramEscape(notice.link.url)}">${telegramEscape(notice.link.label)}</a>`;
  return {
    chat_id: config.chatId,
    text: `${title}\n\n${chat.noticeText(notice, telegramEscape, 3000)}${link}`,
    parse_mode: "HTML",
    link_preview_options: { is_disabled: true },
  };
}

/** The `sendMessage` body of several submissions, within the one text's 4 096 characters. */
export function telegramDigest(
  envelopes: SubmissionEnvelope[],
  config: Pick<TelegramConfig, "chatId" | "template">,
) {
  const title = `<b>${chat.cutEscaped(chat.digestTitle(envelopes), 300, telegramEscape)}</b>`;
  const room = Math.floor((TELEGRAM_MAX_CHARS - title.length) / envelopes.length) - 4;
  const parts = envelopes.map((envelope) => {
    const footer = `<i>${telegramEscape(chat.smallPrint(envelope))}</i>`;
    const text = chat.digestPart(envelope, {
      template: config.template,
      escape: telegramEscape,
      line: (name, value) => `<b>${name}:</b> ${value}`,
      maxChars: room - footer.length - 1,
    });
    return `${text}\n${footer}`;
  });
  return {
    chat_id: config.chatId,
    text: [title, ...parts].join("\n\n"),
    parse_mode: "HTML",
    link_preview_options: { is_disabled: true },
  };
}

/** Reads the Bot API's answer: `{"ok":true}`; 429 with `parameters.retry_after`; a lost chat pauses. */
export function readTelegramAnswer(url: URL, response: chat.ChatResponse) {
  const json = chat.answerJson(response.body);
  if (response.status >= 200 && response.status < 300 && json.ok === true) {
    return { statusCode: response.status };
  }
  const words = chat.serviceWords(json.description);
  const parameters = (json.parameters ?? {}) as Record<string, unknown>;
  const retryAfter = Number(parameters.retry_after);
  const retryAfterMs = response.status === 429 && Number.isFinite(retryAfter) && retryAfter >= 0
    ? retryAfter * 1000
    : undefined;
  // Blocked or kicked (403), a revoked token (401, 404), a chat that is no more (400).
  const gone = [401, 403, 404].includes(response.status) ||
    (response.status === 400 &&
      /chat not found|group chat was (deleted|upgraded)/i.test(words ?? ""));
  return chat.chatFailure(url, response, { words, gone, retryAfterMs });
}

/** The Telegram destination type. */
export const telegramDestination = chatDestination<TelegramConfig, "telegram">({
  type: "telegram",
  label: "Telegram",
  schema: telegramConfigSchema,
  secrets: TELEGRAM_SECRETS,
  // The API base is the deployment's setting (TELEGRAM_API_URL), not the tenant's.
  url: (config, deps) => new URL(`${deps.config.telegramApiUrl}/bot${config.botToken}/sendMessage`),
  target: () => ({ method: "POST", url: "https://api.telegram.org" }),
  hosts: () => [],
  message: telegramMessage,
  digest: telegramDigest,
  notice: telegramNotice,
  // About one message a second per chat; 300 characters at least per submission.
  pace: { maxPerMessage: 8, minGapMs: 1000 },
  read: readTelegramAnswer,
  where:
    "In Telegram: talk to @BotFather, send /newbot and copy the token; add the bot to your group or channel.",
  fields: [
    {
      name: "botToken",
      label: "Bot token",
      kind: "secret",
      help: 'From @BotFather, e.g. "123456789:AAE…".',
    },
    {
      name: "chatId",
      label: "Chat",
      kind: "text",
      numeric: true,
      help:
        'A chat id (a number; groups start with "-") or a public channel\'s "@name". The bot must be a member.',
    },
  ],
});
