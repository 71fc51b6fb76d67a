import assert from "node:assert/strict";
import type { SubmissionEnvelope } from "../../submission.ts";
import {
  deliveryFailure,
  deliveryRequest,
  ENVELOPE,
  httpDeps,
  loopbackGuard,
  startSink,
} from "../../tests/helpers/connector_sink.ts";
import { type ChatService, startChatReceiver } from "../../tests/helpers/chat_receivers.ts";
import { type Connector, DeliveryError, type Notice } from "../types.ts";
import type { ConnectorDeps } from "../descriptor.ts";
import { discordDestination } from "./discord.ts";
import { readSlackAnswer, slackDestination } from "./slack.ts";
import { teamsDestination } from "./teams.ts";
import { telegramDestination } from "./telegram.ts";

const TOKEN = "123456789:AAEabcdefghijklmnopqrstuvwxyz012345";

/**
 * A connector of `service` and the config pointing at `url`; with `pinned`, its requests
 * take the path of a public host name (connected to the address the guard approved).
 */
function connectorFor(
  service: ChatService,
  url: string,
  extra: Record<string, unknown> = {},
  options: { pinned?: boolean } = {},
) {
  const deps = options.pinned ? httpDeps(15_000, loopbackGuard().guard) : httpDeps(15_000);
  // The HTTP deps, and the Telegram API at the receiver.
  const connectorDeps = { http: deps, config: { telegramApiUrl: url } } as ConnectorDeps;
  const create = (descriptor: { create: (deps: ConnectorDeps, onClose: () => void) => unknown }) =>
    descriptor.create(connectorDeps, () => {}) as Connector<unknown>;
  const connectors: Record<ChatService, [Connector<unknown>, unknown]> = {
    slack: [create(slackDestination), { url }],
    discord: [create(discordDestination), { url }],
    teams: [create(teamsDestination), { url }],
    telegram: [create(telegramDestination), { botToken: TOKEN, chatId: -1001234 }],
  };
  const [connector, base] = connectors[service];
  const config = connector.configSchema.parse({ ...base as object, ...extra });
  return {
    connector,
    notice: (notice: Notice) =>
      connector.notice!.sendNotice(config, {
        notice,
        id: "notice-1",
        signal: AbortSignal.timeout(5000),
      }),
    deliver: (envelope: SubmissionEnvelope = ENVELOPE) =>
      connector.deliver({ ...deliveryRequest(config), envelope }),
  };
}

const SERVICES: ChatService[] = ["slack", "discord", "teams", "telegram"];

/** Every text of a message, joined: what a person would read. */
const allText = (body: unknown) => JSON.stringify(body);

/** The 128 KB worst case: 1 000 fields with long values (and long names). */
function worstCase(): SubmissionEnvelope {
  const payload: Record<string, string> = {};
  for (let i = 0; i < 1000; i++) payload[`field_${i}_${"n".repeat(20)}`] = "<&>".repeat(20);
  payload.long = "x".repeat(20_000);
  const size = new TextEncoder().encode(JSON.stringify(payload)).length;
  assert.ok(size > 110_000 && size <= 131_072, `payload of ${size} bytes`);
  return { ...ENVELOPE, formName: "F".repeat(500), payload };
}

/** The worst accepted template: one field named as often as 4 096 characters allow. */
const WORST_TEMPLATE = "{{fields.x}}".repeat(341);

/** `<&>` as each service's escaping shows it. */
const SHOWN: Record<ChatService, string> = {
  slack: "&lt;&amp;&gt;",
  discord: "\\<&\\>",
  teams: "<&>",
  telegram: "&lt;&amp;&gt;",
};

for (const service of SERVICES) {
  Deno.test(`${service}: a readable message the service accepts`, async () => {
    await using receiver = startChatReceiver(service);
    const { deliver } = connectorFor(service, receiver.url);
    const receipt = await deliver();
    assert.ok(receipt.statusCode! >= 200 && receipt.statusCode! < 300);
    assert.equal(receiver.accepted.length, 1, receiver.refused.join());
    const text = allText(receiver.accepted[0]);
    // The form's name, the fields in order (arrays joined), the time and origin.
    let at = 0;
    for (const word of ["Contact", "name", "Ada", "email", "ada@example.com", "topics", "a, b"]) {
      at = text.indexOf(word, at);
      assert.ok(at >= 0, `${word} in order in ${text}`);
    }
    assert.ok(text.includes("2025-01-02T03:04:05.000Z"));
    assert.ok(text.includes("https://site.example"));
  });

  Deno.test(`${service}: 128 KB of 1 000 fields still makes a message within every limit`, async () => {
    await using receiver = startChatReceiver(service);
    const { deliver } = connectorFor(service, receiver.url);
    await deliver(worstCase());
    assert.deepEqual(receiver.refused, []);
    assert.match(allText(receiver.accepted[0]), /\(\d+ more fields\)/);
    assert.ok(allText(receiver.accepted[0]).includes("…"));
  });

  Deno.test(`${service}: the same worst case within limits with the {{fields}} template`, async () => {
    await using receiver = startChatReceiver(service);
    const { deliver } = connectorFor(service, receiver.url, {
      template: `${"Header text. ".repeat(100)}\n{{fields}}\n{{fields.long}}`,
    });
    await deliver(worstCase());
    assert.deepEqual(receiver.refused, []);
  });

  Deno.test(`${service}: the worst template with a 128 KB value, alone and in a digest, within limits`, async () => {
    await using receiver = startChatReceiver(service);
    // The largest accepted template naming one field 341 times; the value 128 KB of `<&>`.
    const { deliver } = connectorFor(service, receiver.url, { template: WORST_TEMPLATE });
    const envelopes = Array.from({ length: 10 }, (_, i) => ({
      ...ENVELOPE,
      submissionId: `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`,
      payload: { x: "<&>".repeat(43_691) },
    }));
    // One alone, then nine at once: those go as one digest.
    const receipts = [await deliver(envelopes[0])];
    receipts.push(...await Promise.all(envelopes.slice(1).map((envelope) => deliver(envelope))));
    assert.ok(receipts.every((r) => r.statusCode! >= 200 && r.statusCode! < 300));
    assert.deepEqual(receiver.refused, []);
    assert.ok(receiver.accepted.length >= 2, `${receiver.accepted.length} messages`);
    for (const body of receiver.accepted) {
      const text = allText(body);
      // The value as the service shows it, escaped, then cut with an ellipsis.
      assert.ok(text.includes(JSON.stringify(SHOWN[service].repeat(20)).slice(1, -1)), text);
      assert.ok(text.includes("…"));
      assert.ok(text.includes(ENVELOPE.metadata.submittedAt));
      assert.ok(text.length < 30_000, `${text.length} characters`);
    }
    assert.ok(
      receiver.accepted.some((body) => /\d+ new submissions to Contact/.test(allText(body))),
    );
  });

  Deno.test(`${service}: a 429 holds the message as told and it is sent then; a deleted webhook is "gone"`, async () => {
    await using receiver = startChatReceiver(service);
    const { deliver } = connectorFor(service, receiver.url);
    receiver.refuseNext = 1;
    const started = Date.now();
    await deliver();
    assert.deepEqual(receiver.refused, ["429"]);
    assert.equal(receiver.accepted.length, 1);
    assert.ok(Date.now() - started >= 250, "waited as the service said");
    receiver.deleted = true;
    const gone = await deliveryFailure(() => deliver());
    assert.equal(gone.gone, true);
    assert.equal(gone.permanent, false, "held, not failed: the destination is paused");
    assert.equal(gone.blame, "destination");
    assert.ok(!gone.message.includes("secretpath") && !gone.message.includes(TOKEN), gone.message);
  });

  Deno.test(`${service}: through a public host name's connection, its answers are read as well`, async () => {
    await using receiver = startChatReceiver(service);
    const url = receiver.url.replace("127.0.0.1", "chat.example");
    const { deliver } = connectorFor(service, url, {}, { pinned: true });
    const receipt = await deliver();
    assert.ok(receipt.statusCode! >= 200 && receipt.statusCode! < 300);
    assert.equal(receiver.accepted.length, 1, receiver.refused.join());
    receiver.deleted = true;
    const gone = await deliveryFailure(() => deliver());
    assert.equal(gone.gone, true, gone.message);
  });

  Deno.test(`${service}: a burst becomes digests, each submission its own delivery, within limits`, async () => {
    await using receiver = startChatReceiver(service);
    const { deliver } = connectorFor(service, receiver.url);
    const burst = Array.from({ length: 30 }, (_, i) => ({
      ...worstCase(),
      formName: "Contact",
      submissionId: `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`,
    }));
    const receipts = await Promise.all(burst.map((envelope) => deliver(envelope)));
    assert.equal(receipts.length, 30);
    assert.deepEqual(receiver.refused, []);
    assert.ok(receiver.accepted.length < 30, `${receiver.accepted.length} messages`);
    assert.match(allText(receiver.accepted.at(-1)), /\d+ new submissions to Contact/);
    assert.ok(receipts.some((r) => /^Sent in a digest of \d+ submissions$/.test(r.detail ?? "")));
    assert.ok(receipts.every((r) => r.statusCode! >= 200 && r.statusCode! < 300));
  });
}

Deno.test("discord: its X-RateLimit headers are heeded, so a burst never meets a 429", async () => {
  await using receiver = startChatReceiver("discord");
  // One message a second, announced on every answer; the connector's own gap is shorter.
  receiver.perSecond = 1;
  const { deliver } = connectorFor("discord", receiver.url);
  const first = deliver();
  await first;
  await Promise.all(Array.from({ length: 12 }, () => deliver()));
  assert.deepEqual(receiver.refused, []);
  assert.ok(receiver.accepted.length >= 2);
});

const INJECTION = {
  message: "@everyone @here <!channel> <!here> <@U123> <#C123> <b>bold</b> *md* [x](https://e.x)",
};

Deno.test("slack: mentions and markup in a payload are escaped text", async () => {
  await using receiver = startChatReceiver("slack");
  await connectorFor("slack", receiver.url).deliver({ ...ENVELOPE, payload: INJECTION });
  const text = allText(receiver.accepted[0]);
  for (const raw of ["<!channel>", "<!here>", "<@U123>", "<#C123>", "<b>"]) {
    assert.ok(!text.includes(raw), raw);
  }
  assert.ok(text.includes("&lt;!channel&gt;") && text.includes("&lt;@U123&gt;"));
});

Deno.test("discord: mentions are disabled and markdown escaped", async () => {
  await using receiver = startChatReceiver("discord");
  await connectorFor("discord", receiver.url, { username: "Forms" }).deliver({
    ...ENVELOPE,
    payload: INJECTION,
  });
  const body = receiver.accepted[0] as { allowed_mentions: unknown; username: string };
  assert.deepEqual(body.allowed_mentions, { parse: [] });
  assert.equal(body.username, "Forms");
  const text = allText(body);
  assert.ok(text.includes("\\\\*md\\\\*"), text);
});

Deno.test("telegram: HTML in a payload is escaped; Telegram parses the message", async () => {
  await using receiver = startChatReceiver("telegram");
  await connectorFor("telegram", receiver.url).deliver({ ...ENVELOPE, payload: INJECTION });
  const body = receiver.accepted[0] as { text: string; parse_mode: string; chat_id: number };
  assert.equal(body.parse_mode, "HTML");
  assert.equal(body.chat_id, -1001234);
  assert.ok(body.text.includes("&lt;b&gt;bold&lt;/b&gt;"));
  assert.ok(body.text.startsWith("<b>Contact</b>"));
});

Deno.test("templates: the tenant's markup stays, the visitor's values are escaped", async () => {
  await using receiver = startChatReceiver("telegram");
  const template = "<b>{{formName}}</b> from {{fields.name}} ({{fields.missing}}) at " +
    "{{submittedAt}} via {{origin}}, #{{submissionId}}\n{{fields}}";
  await connectorFor("telegram", receiver.url, { template }).deliver({
    ...ENVELOPE,
    payload: { name: "<i>Eve</i> & co" },
  });
  const { text } = receiver.accepted[0] as { text: string };
  assert.ok(
    text.includes(
      "<b>Contact</b> from &lt;i&gt;Eve&lt;/i&gt; &amp; co () at 2025-01-02T03:04:05.000Z " +
        `via https://site.example, #${ENVELOPE.submissionId}\n<b>name:</b> &lt;i&gt;Eve`,
    ),
    text,
  );
});

/** A notice whose lines carry markup and mentions, which must stay text. */
const NOTICE: Notice = {
  event: "message.attempt.failing",
  title: "formrelay: A destination is failing: Webhook to hooks.example.com (form <b>Contact</b>)",
  lines: ["Form: <b>Contact</b> @channel <@U123>", "Reason: the receiver had an error (HTTP 503)."],
  link: { label: "See the destination", url: "https://forms.example.com/#/forms/f1/destinations" },
  data: { type: "message.attempt.failing" },
};

for (const service of SERVICES) {
  Deno.test(`${service}: a notice is one message of its own the service accepts, titled by its event, with the console link`, async () => {
    await using receiver = startChatReceiver(service);
    const receipt = await connectorFor(service, receiver.url).notice(NOTICE);
    assert.ok(receipt.statusCode! >= 200 && receipt.statusCode! < 300);
    assert.equal(receiver.accepted.length, 1, receiver.refused.join());
    const text = allText(receiver.accepted[0]);
    assert.ok(text.includes("A destination is failing"), text);
    assert.ok(text.includes("HTTP 503"));
    assert.ok(text.includes("https://forms.example.com/#/forms/f1/destinations"));
    assert.ok(!/new submission/i.test(text), "never worded as a submission");
    // Teams renders no HTML (SHOWN): there `<b>` is text as it stands.
    if (service !== "teams") {
      assert.ok(!text.includes("<b>Contact</b> @channel"), "markup in the lines is escaped");
    }
  });
}

Deno.test("slack: 400 no_text is the message's fault, not the webhook's; 200 ok delivers", () => {
  const url = new URL("https://hooks.slack.example/services/T/B/secret");
  const refused = readSlackAnswer(url, { status: 400, headers: new Headers(), body: "no_text" });
  assert.ok(refused instanceof DeliveryError);
  assert.equal(refused.blame, "submission");
  assert.equal(refused.permanent, true);
  assert.equal(refused.gone, false);
  assert.equal(refused.message, 'Cannot deliver to "https://hooks.slack.example": 400: no_text');
  assert.deepEqual(readSlackAnswer(url, { status: 200, headers: new Headers(), body: "ok" }), {
    statusCode: 200,
  });
});

Deno.test("chat connectors follow no redirect: a 307 or 308 is a failure, nothing is resent", async (t) => {
  await using elsewhere = startSink(() => Response.json({ ok: true }));
  await using moved = startSink((request) =>
    new Response(null, {
      status: request.url.pathname.startsWith("/308") ? 308 : 307,
      headers: { location: `${elsewhere.origin}/in` },
    })
  );
  for (const service of SERVICES) {
    for (const status of [307, 308]) {
      await t.step(`${service} ${status}`, async () => {
        const { deliver } = connectorFor(service, `${moved.origin}/${status}/hook`);
        const error = await deliveryFailure(deliver);
        assert.equal(error.permanent, true);
        assert.equal(error.statusCode, status);
        assert.equal(elsewhere.requests.length, 0);
      });
    }
  }
});
