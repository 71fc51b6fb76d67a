/**
 * Slack incoming webhooks: the submission as Block Kit (the form's name, one mrkdwn
 * section per group of `name: value` lines, the small print as context) with a `text`
 * fallback, every value escaped (`&`, `<`, `>`), so `<!channel>` or `<@U123>` in a
 * payload is text, not a mention. Within Slack's limits whatever was sent: at most 50
 * blocks, sections of at most 3 000 characters; a template's text at most 12 000.
 *
 * @module
 */
import { z } from "zod";
import type { SubmissionEnvelope } from "../../submission.ts";
import type { Notice } from "../types.ts";
import { CHAT_WEBHOOK_FIELDS, chatDestination } from "./destination.ts";
import * as chat from "./common.ts";

/** Slack destination config. */
export const slackConfigSchema = z.strictObject(CHAT_WEBHOOK_FIELDS);

export type SlackConfig = z.infer<typeof slackConfigSchema>;

/**
 * Slack's limits (Block Kit), and the most a templated message shows: four sections,
 * enough for any form, short enough to read in a channel.
 */
export const SLACK_LIMITS = {
  blocks: 50,
  sectionChars: 3000,
  fieldValueChars: 2000,
  templateChars: 12_000,
} as const;

/** Escapes text for Slack's mrkdwn and `text`: `&`, `<`, `>` (mentions and links need them). */
export function slackEscape(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

const section = (text: string) => ({ type: "section", text: { type: "mrkdwn", text } });
const context = (text: string) => ({
  type: "context",
  elements: [{ type: "mrkdwn", text }],
});

/** The Slack message of one submission. */
export function slackMessage(envelope: SubmissionEnvelope, config: Pick<SlackConfig, "template">) {
  const title = chat.cutEscaped(envelope.formName, 150, slackEscape);
  // Title, the "(N more fields)" note and the small print leave the rest to the fields.
  const maxSections = SLACK_LIMITS.blocks - 3;
  const line = (name: string, value: string) => `*${name}:* ${value}`;
  const rendered = chat.renderConfigTemplate(config.template, envelope, {
    escape: slackEscape,
    fieldList: () =>
      chat.fieldList(envelope, {
        maxName: 200,
        maxValue: SLACK_LIMITS.fieldValueChars,
        escape: slackEscape,
        line,
        room: SLACK_LIMITS.templateChars,
      }),
    maxFieldChars: SLACK_LIMITS.sectionChars,
    maxChars: SLACK_LIMITS.templateChars,
  });
  const { shown, more } = rendered === null
    ? chat.fieldsWithin(
      envelope,
      { maxName: 200, maxValue: SLACK_LIMITS.fieldValueChars, escape: slackEscape },
      () => true,
    )
    : { shown: [], more: 0 };
  const lines = shown.map(({ name, value }) => line(name, value));
  const chunks = rendered === null
    ? packLines(lines)
    : chat.chunkText(rendered, SLACK_LIMITS.sectionChars);
  const sections = chunks.slice(0, maxSections).map(section);
  const blocks: unknown[] = [section(`*${title}*`), ...sections];
  const dropped = rendered === null ? more + countLines(chunks.slice(maxSections)) : 0;
  if (dropped > 0) blocks.push(context(chat.moreFields(dropped)));
  blocks.push(context(slackEscape(chat.smallPrint(envelope))));
  return { text: `New submission to ${title}`, blocks };
}

/** Lines packed into sections of at most SLACK_LIMITS.sectionChars characters. */
function packLines(lines: string[]): string[] {
  const chunks: string[] = [];
  let current = "";
  for (const line of lines) {
    const next = current === "" ? line : `${current}\n${line}`;
    if (next.length <= SLACK_LIMITS.sectionChars) current = next;
    else {
      chunks.push(current);
      current = line;
    }
  }
  if (current !== "") chunks.push(current);
  return chunks;
}

/** Field lines in packed sections (each line is one field). */
function countLines(chunks: string[]): number {
  return chunks.reduce((sum, chunk) => sum + chunk.split("\n").length, 0);
}

/** The Slack message of several submissions: a section and a context line each. */
export function slackDigest(
  envelopes: SubmissionEnvelope[],
  config: Pick<SlackConfig, "template">,
) {
  const title = chat.cutEscaped(chat.digestTitle(envelopes), 300, slackEscape);
  const blocks: unknown[] = [section(`*${title}*`)];
  for (const envelope of envelopes) {
    const part = chat.digestPart(envelope, {
      template: config.template,
      escape: slackEscape,
      line: (name, value) => `*${name}:* ${value}`,
      maxChars: SLACK_LIMITS.sectionChars,
    });
    blocks.push(
      { type: "divider" },
      section(part),
      context(slackEscape(chat.smallPrint(envelope))),
    );
  }
  return { text: title, blocks };
}

/** The Slack message of an owner notice: its title, its lines and the console link. */
export function slackNotice(notice: Notice) {
  const title = chat.cutEscaped(notice.title, 150, slackEscape);
  const blocks: unknown[] = [
    section(`*${title}*`),
    section(chat.noticeText(notice, slackEscape, SLACK_LIMITS.sectionChars)),
  ];
  if (notice.link !== null) {
    blocks.push(section(`<${notice.link.url}|${slackEscape(notice.link.label)}>`));
  }
  return { text: title, blocks };
}

/** Slack's answers that mean the webhook or its channel is gone. */
const GONE = new Set([
  "channel_not_found",
  "no_service",
  "channel_is_archived",
  "action_prohibited",
  "invalid_token",
  "no_active_hooks",
  "team_disabled",
]);

/** Reads Slack's answer: 200 `ok`; a gone webhook pauses; `no_text`-like 400s are the message's. */
export function readSlackAnswer(url: URL, response: chat.ChatResponse) {
  if (response.status >= 200 && response.status < 300) return { statusCode: response.status };
  const words = chat.serviceWords(response.body) ??
    chat.serviceWords(chat.answerJson(response.body).error);
  const gone = [403, 404, 410].includes(response.status) && words !== null && GONE.has(words);
  return chat.chatFailure(url, response, { words, gone });
}

/** The Slack destination type. */
export const slackDestination = chatDestination<SlackConfig, "slack">({
  type: "slack",
  label: "Slack",
  schema: slackConfigSchema,
  url: (config) => new URL(config.url),
  message: slackMessage,
  digest: slackDigest,
  notice: slackNotice,
  // About one message a second per webhook; 3 blocks a submission within 50.
  pace: { maxPerMessage: 16, minGapMs: 1000 },
  read: readSlackAnswer,
  where:
    "In Slack: create an app at api.slack.com/apps, turn on Incoming Webhooks, add one to a channel and copy its URL.",
  fields: [{
    name: "url",
    label: "Incoming webhook URL",
    kind: "url",
    help: "https://hooks.slack.com/services/…: keep it secret, it is the key to the channel.",
  }],
});
