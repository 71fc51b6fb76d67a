/**
 * Local receivers that behave as Slack, Discord, Microsoft Teams and Telegram document
 * (connectors/chat/): they refuse a message without its text, enforce each service's
 * limits, answer `429` with their rate-limit headers and body past their pace, and
 * answer as a deleted webhook or a lost chat does when told to. Loopback only.
 *
 * @module
 */

/** The services a receiver can play. */
export type ChatService = "slack" | "discord" | "teams" | "telegram";

/** A chat receiver: what it accepted, what it refused, and switches. */
export interface ChatReceiver extends AsyncDisposable {
  /** The base URL: the webhook URL (Slack, Discord, Teams) or TELEGRAM_API_URL. */
  url: string;
  /** Bodies of the messages it accepted, in order. */
  accepted: Record<string, unknown>[];
  /** Why it refused each refused message (limit broken, 429…), in order. */
  refused: string[];
  /** Answer as a deleted webhook, or a chat the bot was removed from. */
  deleted: boolean;
  /** Messages a second it takes before answering 429 (0: no limit). */
  perSecond: number;
  /** Answer this many next messages 429 whatever the pace. */
  refuseNext: number;
}

/** Characters of a Telegram HTML text after entity parsing: tags out, escapes as one. */
function telegramVisible(html: string): string {
  return html.replace(/<[^>]*>/g, "").replace(/&(lt|gt|amp|quot);/g, "x");
}

/** Whether Telegram's HTML parser takes a text: only its tags, balanced, no stray `<` or `&`. */
function telegramParses(html: string): boolean {
  const stack: string[] = [];
  for (const match of html.matchAll(/<(\/?)([a-z-]*)[^>]*>|<|&(?!(lt|gt|amp|quot);)/g)) {
    if (match[2] === undefined || !["b", "i", "u", "s", "code", "pre", "a"].includes(match[2])) {
      return false;
    }
    if (match[1] === "") stack.push(match[2]);
    else if (stack.pop() !== match[2]) return false;
  }
  return stack.length === 0;
}

type Verdict = { status: number; body: string; headers?: Record<string, string> } | null;

/** Slack's checks: `text` or `blocks`, ≤ 50 blocks, section text ≤ 3 000. */
function slackVerdict(body: Record<string, unknown>): Verdict {
  const blocks = (body.blocks ?? []) as { type: string; text?: { text: string } }[];
  if (typeof body.text !== "string" || body.text === "") {
    if (blocks.length === 0) return { status: 400, body: "no_text" };
  }
  if (blocks.length > 50) return { status: 400, body: "invalid_blocks" };
  for (const block of blocks) {
    if (block.type === "section" && (block.text?.text.length ?? 0) > 3000) {
      return { status: 400, body: "invalid_blocks" };
    }
  }
  return null;
}

/** Discord's checks: `content` or `embeds`, and every embed limit. */
function discordVerdict(body: Record<string, unknown>): Verdict {
  const invalid = {
    status: 400,
    body: JSON.stringify({ code: 50035, message: "Invalid Form Body" }),
  };
  const embeds = (body.embeds ?? []) as Record<string, unknown>[];
  const content = typeof body.content === "string" ? body.content : "";
  if (content === "" && embeds.length === 0) {
    return {
      status: 400,
      body: JSON.stringify({ code: 50006, message: "Cannot send an empty message" }),
    };
  }
  if (content.length > 2000 || embeds.length > 10) return invalid;
  let total = 0;
  for (const embed of embeds) {
    const title = String(embed.title ?? "");
    const description = String(embed.description ?? "");
    const footer = String((embed.footer as { text?: string } | undefined)?.text ?? "");
    const fields = (embed.fields ?? []) as { name: string; value: string }[];
    if (title.length > 256 || description.length > 4096 || footer.length > 2048) return invalid;
    if (fields.length > 25) return invalid;
    for (const field of fields) {
      if (!field.name || !field.value) return invalid;
      if (field.name.length > 256 || field.value.length > 1024) return invalid;
      total += field.name.length + field.value.length;
    }
    total += title.length + description.length + footer.length;
  }
  return total > 6000 ? invalid : null;
}

/** Teams' checks: a message with an Adaptive Card, under 28 KB. */
function teamsVerdict(body: Record<string, unknown>, bytes: number): Verdict {
  if (bytes > 28 * 1024) return { status: 413, body: "Payload too large" };
  const attachment = (body.attachments as Record<string, unknown>[] | undefined)?.[0];
  const card = attachment?.content as Record<string, unknown> | undefined;
  if (
    body.type !== "message" ||
    attachment?.contentType !== "application/vnd.microsoft.card.adaptive" ||
    card?.type !== "AdaptiveCard" || !Array.isArray(card.body)
  ) return { status: 400, body: "Expected an Adaptive Card" };
  return null;
}

/** Telegram's checks: `chat_id`, `text` of 1 to 4 096 characters, HTML it can parse. */
function telegramVerdict(body: Record<string, unknown>, path: string): Verdict {
  const bad = (description: string) => ({
    status: 400,
    body: JSON.stringify({
      ok: false,
      error_code: 400,
      description: `Bad Request: ${description}`,
    }),
  });
  if (!/^\/bot\d+:[\w-]+\/sendMessage$/.test(path)) {
    return {
      status: 404,
      body: JSON.stringify({ ok: false, error_code: 404, description: "Not Found" }),
    };
  }
  if (body.chat_id === undefined) return bad("chat_id is empty");
  const text = typeof body.text === "string" ? body.text : "";
  if (text === "") return bad("message text is empty");
  if (body.parse_mode === "HTML" && !telegramParses(text)) return bad("can't parse entities");
  const visible = body.parse_mode === "HTML" ? telegramVisible(text) : text;
  if (visible.length > 4096) return bad("message is too long");
  return null;
}

/** How each service answers a deleted webhook or a lost chat. */
const GONE: Record<ChatService, { status: number; body: string }> = {
  slack: { status: 404, body: "channel_not_found" },
  discord: { status: 404, body: JSON.stringify({ code: 10015, message: "Unknown Webhook" }) },
  teams: { status: 404, body: "" },
  telegram: {
    status: 403,
    body: JSON.stringify({
      ok: false,
      error_code: 403,
      description: "Forbidden: bot was kicked from the group chat",
    }),
  },
};

/** A 429 as each service sends it. */
function tooMany(
  service: ChatService,
  waitMs: number,
): { status: number; body: string; headers: Record<string, string> } {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  if (service === "discord") {
    return {
      status: 429,
      headers: {
        "retry-after": String(seconds),
        "x-ratelimit-limit": "1",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset-after": (waitMs / 1000).toFixed(3),
        "x-ratelimit-bucket": "test",
        "content-type": "application/json",
      },
      body: JSON.stringify({
        message: "You are being rate limited.",
        retry_after: waitMs / 1000,
        global: false,
      }),
    };
  }
  if (service === "telegram") {
    return {
      status: 429,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        ok: false,
        error_code: 429,
        description: `Too Many Requests: retry after ${seconds}`,
        parameters: { retry_after: seconds },
      }),
    };
  }
  return { status: 429, headers: { "retry-after": String(seconds) }, body: "rate_limited" };
}

/** Starts a receiver playing `service` on a loopback port. */
export function startChatReceiver(service: ChatService): ChatReceiver {
  const sent: number[] = [];
  const receiver: ChatReceiver = {
    url: "",
    accepted: [],
    refused: [],
    deleted: false,
    perSecond: 0,
    refuseNext: 0,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
    },
  };
  const answer = (verdict: NonNullable<Verdict>) =>
    new Response(verdict.body === "" ? null : verdict.body, {
      status: verdict.status,
      headers: verdict.headers,
    });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const raw = await request.text();
    const path = new URL(request.url).pathname;
    if (receiver.deleted) return answer(GONE[service]);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw);
    } catch {
      receiver.refused.push("not JSON");
      return answer({ status: 400, body: "invalid_payload" });
    }
    const now = Date.now();
    if (receiver.refuseNext > 0) {
      receiver.refuseNext--;
      receiver.refused.push("429");
      return answer(tooMany(service, 300));
    }
    if (receiver.perSecond > 0) {
      while (sent.length > 0 && sent[0] <= now - 1000) sent.shift();
      if (sent.length >= receiver.perSecond) {
        receiver.refused.push("429");
        return answer(tooMany(service, sent[0] + 1000 - now));
      }
    }
    const bytes = new TextEncoder().encode(raw).length;
    const verdict = service === "slack"
      ? slackVerdict(body)
      : service === "discord"
      ? discordVerdict(body)
      : service === "teams"
      ? teamsVerdict(body, bytes)
      : telegramVerdict(body, path);
    if (verdict !== null) {
      receiver.refused.push(verdict.body);
      return answer(verdict);
    }
    sent.push(now);
    receiver.accepted.push(body);
    const quota: Record<string, string> = service === "discord" && receiver.perSecond > 0
      ? {
        "x-ratelimit-limit": String(receiver.perSecond),
        "x-ratelimit-remaining": String(receiver.perSecond - sent.length),
        "x-ratelimit-reset-after": "1.000",
      }
      : {};
    if (service === "slack") return answer({ status: 200, body: "ok", headers: quota });
    if (service === "discord") return answer({ status: 204, body: "", headers: quota });
    if (service === "teams") return answer({ status: 202, body: "" });
    return answer({
      status: 200,
      body: JSON.stringify({ ok: true, result: { message_id: receiver.accepted.length } }),
    });
  });
  receiver.url = service === "telegram"
    ? `http://127.0.0.1:${server.addr.port}`
    : `http://127.0.0.1:${server.addr.port}/hooks/T000/B000/secretpath`;
  return receiver;
}
