/**
 * Discord webhooks: the submission as one embed (the form's name as its title, the
 * fields as embed fields, the small print as its footer) with `allowed_mentions`
 * parsing nothing, and Discord's markdown in values escaped, so `@everyone` or `**`
 * in a payload is text. Within Discord's limits whatever was sent: at most 25 fields of
 * 1 024 characters, a description of 4 096, all embeds together 6 000.
 *
 * @module
 */
import { z } from "zod";
import type { SubmissionEnvelope } from "../../submission.ts";
import type { Notice } from "../types.ts";
import { CHAT_WEBHOOK_FIELDS, chatDestination } from "./destination.ts";
import * as chat from "./common.ts";

/** Discord destination config. */
export const discordConfigSchema = z.strictObject({
  url: CHAT_WEBHOOK_FIELDS.url,
  username: z.string().trim().min(1).max(80).optional(),
  template: CHAT_WEBHOOK_FIELDS.template,
});

export type DiscordConfig = z.infer<typeof discordConfigSchema>;

/** Discord's limits of one message with embeds. */
export const DISCORD_LIMITS = {
  content: 2000,
  title: 256,
  description: 4096,
  fields: 25,
  fieldName: 256,
  fieldValue: 1024,
  footer: 2048,
  total: 6000,
} as const;

/**
 * Escapes Discord markdown (and the `<@…>` mention syntax) with backslashes; mentions
 * never ping anyway (`allowed_mentions`, and embeds do not notify).
 */
export function discordEscape(text: string): string {
  return text.replace(/[\\*_~`|<>#[\]]/g, "\\$&");
}

/** The Discord message of one submission. */
export function discordMessage(
  envelope: SubmissionEnvelope,
  config: Pick<DiscordConfig, "username" | "template">,
) {
  const title = chat.cut(envelope.formName, DISCORD_LIMITS.title);
  const footer = chat.cut(chat.smallPrint(envelope), 200);
  // Room for the "(N more fields)" note in the description.
  let budget = DISCORD_LIMITS.total - title.length - footer.length - 40;
  const maxDescription = Math.min(DISCORD_LIMITS.description, budget);
  const rendered = chat.renderConfigTemplate(config.template, envelope, {
    escape: discordEscape,
    fieldList: () =>
      chat.fieldList(envelope, {
        maxName: 100,
        maxValue: 300,
        escape: discordEscape,
        line: (name, value) => `**${name}:** ${value}`,
        room: maxDescription,
      }),
    maxFieldChars: maxDescription,
    maxChars: maxDescription,
  });
  const embed: Record<string, unknown> = {
    title,
    footer: { text: footer },
    timestamp: envelope.metadata.submittedAt,
    color: 0x5865f2,
  };
  if (rendered !== null) {
    embed.description = rendered;
  } else {
    const { shown, more } = chat.fieldsWithin(
      envelope,
      {
        maxName: 100,
        maxValue: DISCORD_LIMITS.fieldValue,
        escape: discordEscape,
      },
      (field, index) => {
        const size = field.name.length + Math.max(1, field.value.length);
        if (index >= DISCORD_LIMITS.fields || size > budget) return false;
        budget -= size;
        return true;
      },
    );
    // Discord refuses an empty name or value.
    embed.fields = shown.map(({ name, value }) => ({ name: name || "—", value: value || "—" }));
    if (more > 0) embed.description = chat.moreFields(more);
  }
  return {
    ...(config.username === undefined ? {} : { username: config.username }),
    allowed_mentions: { parse: [] },
    embeds: [embed],
  };
}

/** The Discord message of an owner notice: one embed, its title linking to the console. */
export function discordNotice(notice: Notice, config: Pick<DiscordConfig, "username">) {
  const embed: Record<string, unknown> = {
    title: chat.cut(notice.title, DISCORD_LIMITS.title),
    description: chat.noticeText(notice, discordEscape, DISCORD_LIMITS.description),
    color: 0xed4245,
  };
  if (notice.link !== null) embed.url = notice.link.url;
  return {
    ...(config.username === undefined ? {} : { username: config.username }),
    allowed_mentions: { parse: [] },
    embeds: [embed],
  };
}

/** The Discord message of several submissions: one embed each (at most 10). */
export function discordDigest(
  envelopes: SubmissionEnvelope[],
  config: Pick<DiscordConfig, "username" | "template">,
) {
  const room = Math.floor((DISCORD_LIMITS.total - 100) / envelopes.length);
  const embeds = envelopes.map((envelope) => {
    const footer = chat.cut(chat.smallPrint(envelope), 200);
    return {
      description: chat.digestPart(envelope, {
        template: config.template,
        escape: discordEscape,
        line: (name, value) => `**${name}:** ${value}`,
        maxChars: Math.min(DISCORD_LIMITS.description, room - footer.length),
      }) || "—",
      footer: { text: footer },
      timestamp: envelope.metadata.submittedAt,
      color: 0x5865f2,
    };
  });
  return {
    ...(config.username === undefined ? {} : { username: config.username }),
    content: chat.cut(chat.digestTitle(envelopes), DISCORD_LIMITS.content),
    allowed_mentions: { parse: [] },
    embeds,
  };
}

/** Reads Discord's answer: 204 (or 200); 429 with `retry_after`; 404/401 mean the webhook is gone. */
export function readDiscordAnswer(url: URL, response: chat.ChatResponse) {
  if (response.status >= 200 && response.status < 300) return { statusCode: response.status };
  const json = chat.answerJson(response.body);
  const words = chat.serviceWords(json.message);
  const retryAfter = Number(json.retry_after);
  const retryAfterMs = response.status === 429 && Number.isFinite(retryAfter) && retryAfter >= 0
    ? Math.ceil(retryAfter * 1000)
    : undefined;
  const gone = response.status === 404 || response.status === 401;
  return chat.chatFailure(url, response, { words, gone, retryAfterMs });
}

/** The Discord destination type. */
export const discordDestination = chatDestination<DiscordConfig, "discord">({
  type: "discord",
  label: "Discord",
  schema: discordConfigSchema,
  url: (config) => new URL(config.url),
  message: discordMessage,
  digest: discordDigest,
  notice: discordNotice,
  // Per-webhook buckets of about 5 in 2 s; 10 embeds a message at most.
  pace: { maxPerMessage: 10, minGapMs: 500 },
  read: readDiscordAnswer,
  where:
    "In Discord: Server Settings → Integrations → Webhooks → New Webhook, pick the channel, then Copy Webhook URL.",
  fields: [
    {
      name: "url",
      label: "Webhook URL",
      kind: "url",
      help: "https://discord.com/api/webhooks/…: keep it secret, anyone with it can post.",
    },
    {
      name: "username",
      label: "Name shown as the sender",
      kind: "text",
      optional: true,
      help: "Optional; the webhook's own name otherwise.",
    },
  ],
});
