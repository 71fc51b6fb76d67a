/**
 * Microsoft Teams through a Workflows "When a Teams webhook request is received" URL
 * (Office 365 connectors are retired): the submission as an Adaptive Card 1.4 in a
 * message envelope, the fields as a FactSet, markdown in values escaped. The whole card
 * stays under the 28 KB Teams takes, whatever was sent.
 *
 * @module
 */
import { z } from "zod";
import type { SubmissionEnvelope } from "../../submission.ts";
import type { Notice } from "../types.ts";
import { CHAT_WEBHOOK_FIELDS, chatDestination } from "./destination.ts";
import * as chat from "./common.ts";

/** Teams destination config. */
export const teamsConfigSchema = z.strictObject(CHAT_WEBHOOK_FIELDS);

export type TeamsConfig = z.infer<typeof teamsConfigSchema>;

/** Most bytes of the whole message as JSON: under Teams' 28 KB, with room to spare. */
export const TEAMS_MAX_BYTES = 24_000;

/** Escapes the markdown Adaptive Cards render, with backslashes. */
export function teamsEscape(text: string): string {
  return text.replace(/[\\*_~`[\]]/g, "\\$&");
}

const bytes = (value: unknown) => new TextEncoder().encode(JSON.stringify(value)).length;

const textBlock = (text: string, extra: Record<string, unknown> = {}) => ({
  type: "TextBlock",
  text,
  wrap: true,
  ...extra,
});

/** An Adaptive Card 1.4 of `body` in the message envelope Workflows take. */
function teamsEnvelope(body: unknown[]) {
  return {
    type: "message",
    attachments: [{
      contentType: "application/vnd.microsoft.card.adaptive",
      contentUrl: null,
      content: {
        $schema: "http://adaptivecards.io/schemas/adaptive-card.json",
        type: "AdaptiveCard",
        version: "1.4",
        body,
      },
    }],
  };
}

/** The Teams message of an owner notice: its title, its lines and the console link. */
export function teamsNotice(notice: Notice) {
  const body = [
    textBlock(chat.cut(teamsEscape(notice.title), 300), { size: "Medium", weight: "Bolder" }),
    textBlock(chat.noticeText(notice, teamsEscape, 4000)),
  ];
  if (notice.link !== null) {
    body.push(textBlock(`[${teamsEscape(notice.link.label)}](${notice.link.url})`));
  }
  return teamsEnvelope(body);
}

/** The Teams message of one submission. */
export function teamsMessage(envelope: SubmissionEnvelope, config: Pick<TeamsConfig, "template">) {
  const title = textBlock(chat.cut(teamsEscape(envelope.formName), 300), {
    size: "Medium",
    weight: "Bolder",
  });
  const footer = textBlock(teamsEscape(chat.smallPrint(envelope)), {
    size: "Small",
    isSubtle: true,
  });
  let budget = TEAMS_MAX_BYTES - 600 - bytes(title) - bytes(footer);
  // A character can take up to three bytes as UTF-8.
  const maxText = Math.floor(budget / 3);
  const rendered = chat.renderConfigTemplate(config.template, envelope, {
    escape: teamsEscape,
    fieldList: () =>
      chat.fieldList(envelope, {
        maxName: 100,
        maxValue: 500,
        escape: teamsEscape,
        line: (name, value) => `**${name}:** ${value}`,
        room: maxText,
        separator: "\n\n",
      }),
    maxFieldChars: maxText,
    maxChars: maxText,
  });
  const body: unknown[] = [title];
  if (rendered !== null) {
    body.push(textBlock(rendered));
  } else {
    const { shown, more } = chat.fieldsWithin(
      envelope,
      { maxName: 100, maxValue: 2000, escape: teamsEscape },
      (field) => {
        const size = bytes({ title: field.name, value: field.value }) + 1;
        if (size > budget) return false;
        budget -= size;
        return true;
      },
    );
    body.push({
      type: "FactSet",
      facts: shown.map(({ name, value }) => ({ title: name, value })),
    });
    if (more > 0) body.push(textBlock(chat.moreFields(more), { isSubtle: true }));
  }
  body.push(footer);
  return teamsEnvelope(body);
}

/** The Teams message of several submissions: one container each, the card under its limit. */
export function teamsDigest(
  envelopes: SubmissionEnvelope[],
  config: Pick<TeamsConfig, "template">,
) {
  // A character can take up to three bytes as UTF-8, and JSON adds its escapes.
  const room = Math.floor((TEAMS_MAX_BYTES - 1000) / envelopes.length / 3) - 150;
  const body: unknown[] = [
    textBlock(chat.cut(teamsEscape(chat.digestTitle(envelopes)), 300), {
      size: "Medium",
      weight: "Bolder",
    }),
  ];
  for (const envelope of envelopes) {
    const text = chat.digestPart(envelope, {
      template: config.template,
      escape: teamsEscape,
      line: (name, value) => `**${name}:** ${value}`,
      maxChars: room,
    });
    body.push({
      type: "Container",
      separator: true,
      items: [
        textBlock(text.replaceAll("\n", "\n\n")),
        textBlock(teamsEscape(chat.smallPrint(envelope)), { size: "Small", isSubtle: true }),
      ],
    });
  }
  return teamsEnvelope(body);
}

/** Reads the Workflows answer: any 2xx (202); 404 and 410 mean the flow is gone. */
export function readTeamsAnswer(url: URL, response: chat.ChatResponse) {
  if (response.status >= 200 && response.status < 300) return { statusCode: response.status };
  return chat.chatFailure(url, response, {
    gone: response.status === 404 || response.status === 410,
  });
}

/** The Teams destination type. */
export const teamsDestination = chatDestination<TeamsConfig, "teams">({
  type: "teams",
  label: "Microsoft Teams",
  schema: teamsConfigSchema,
  url: (config) => new URL(config.url),
  message: teamsMessage,
  digest: teamsDigest,
  notice: teamsNotice,
  pace: { maxPerMessage: 10, minGapMs: 1000 },
  read: readTeamsAnswer,
  where:
    'In Teams: Workflows → "Post to a channel when a webhook request is received", pick the channel, then copy the URL it gives.',
  fields: [{
    name: "url",
    label: "Workflow webhook URL",
    kind: "url",
    help: "The HTTP POST URL of the workflow: keep it secret, anyone with it can post.",
  }],
});
