/**
 * Owner notifications end to end, against real local peers: an operational webhook
 * (signed), a Slack-like chat receiver and an SMTP server as the platform relay.
 */
import { standardWebhookSignature } from "./helpers/signature.ts";
import assert from "node:assert/strict";
import { REDACTED } from "../connectors/types.ts";
import { notifyOutboxPrefix } from "../store/keys.ts";
import type { PendingEvent } from "../store/notifications.ts";
import { relayUsage } from "../store/relay_usage.ts";
import { startChatReceiver } from "./helpers/chat_receivers.ts";
import { submitAndSettle, switchableSink, webhook } from "./helpers/deliveries.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { type Received, startWebhookSink } from "./helpers/sink.ts";
import { platformRelayOf, startSmtpServer } from "./helpers/smtp_server.ts";
import { waitFor } from "./helpers/wait.ts";
import { confirmAddresses } from "./helpers/notify_confirm.ts";

const SECRET = `whsec_${btoa("0123456789abcdef0123456789abcdef")}`;
/** A payload value that must never reach a notification. */
const PAYLOAD_MARKER = "Ada-Lovelace-private-4417";

/** The signature of what a receiver got, as it checks it. */
function expectedSignature(received: Received): Promise<string> {
  return standardWebhookSignature(SECRET, received);
}

async function putSettings(h: Harness, body: unknown) {
  const response = await h.admin("PUT", "/notifications", body);
  return { status: response.status, body: await response.json() };
}

/** Events of a type the sink got. */
function eventsOf(sink: { received: Received[] }, type: string) {
  return sink.received.filter((r) => r.json?.type === type);
}

async function pendingEvents(h: Harness): Promise<PendingEvent[]> {
  const all: PendingEvent[] = [];
  for await (const entry of h.service.db.kv.list<PendingEvent>({ prefix: notifyOutboxPrefix() })) {
    all.push(entry.value);
  }
  return all;
}

Deno.test("PUT /notifications validates channels and keeps a webhook secret the answer redacts", async (t) => {
  await using h = await startHarness();
  await t.step(
    "defaults: nothing chosen, every event on, summary from NOTIFY_SUMMARY",
    async () => {
      const response = await h.admin("GET", "/notifications");
      assert.equal(response.status, 200);
      const body = await response.json();
      assert.deepEqual(body.notifications.email, null);
      assert.deepEqual(body.notifications.webhook, null);
      assert.ok(body.notifications.events.includes("message.attempt.failing"));
      assert.equal(body.notifications.summary, "off");
    },
  );
  await t.step(
    "unknown chat destination, platform relay not configured, bad secret: 400",
    async () => {
      const { status, body } = await putSettings(h, {
        chat: ["nope"],
        email: { to: ["owner@example.org"] },
        webhook: { url: "http://127.0.0.1:9/hook", secret: "plain" },
      });
      assert.equal(status, 400);
      assert.equal(body.error, "Validation error");
      const paths = body.issues.map((issue: { path: string }) => issue.path).sort();
      assert.deepEqual(paths, ["chat.0", "email.via", "webhook.secret"]);
    },
  );
  await t.step(
    "a private webhook address is refused at save where the deployment forbids it",
    async () => {
      await using strict = await startHarness({ allowPrivateDestinations: false });
      const response = await strict.admin("PUT", "/notifications", {
        webhook: { url: "http://127.0.0.1:9/hook" },
      });
      assert.equal(response.status, 400);
      const body = await response.json();
      assert.deepEqual(body.issues.map((issue: { path: string }) => issue.path), ["webhook.url"]);
    },
  );
  await t.step(
    "the URL path and secret are redacted, and kept when sent back redacted",
    async () => {
      const first = await putSettings(h, {
        webhook: { url: "http://127.0.0.1:9/hook/PATHSECRET", secret: SECRET },
      });
      assert.equal(first.status, 200);
      assert.deepEqual(first.body.notifications.webhook, {
        url: `http://127.0.0.1:9/${REDACTED}`,
        secret: REDACTED,
        signed: true,
        previousSecretValidUntil: null,
      });
      assert.ok(!JSON.stringify(first.body).includes("PATHSECRET"));
      const again = await putSettings(h, { ...first.body.notifications, summary: "daily" });
      assert.equal(again.status, 200);
      assert.equal(again.body.notifications.webhook.signed, true);
      assert.equal(again.body.notifications.summary, "daily");
      const removed = await putSettings(h, {
        webhook: { url: `http://127.0.0.1:9/${REDACTED}`, secret: null },
      });
      assert.equal(removed.body.notifications.webhook.signed, false);
    },
  );
});

Deno.test("a failing destination is told early (signed), failed submissions are told by id and grouped per hour, then recovery", async () => {
  await using h = await startHarness({ retryScheduleMs: [20, 20], pauseAfterMs: 0 });
  await using ops = startWebhookSink();
  const { sink: broken, state } = switchableSink(500);
  await using _broken = broken;
  const form = await h.createForm();
  const destinationId = await h.addDestination(form.id, webhook(`${broken.url}/x`));
  assert.equal((await putSettings(h, { webhook: { url: ops.url, secret: SECRET } })).status, 200);

  const first = await submitAndSettle(h, form.publicKey, { name: PAYLOAD_MARKER });
  await waitFor(
    () =>
      eventsOf(ops, "message.attempt.exhausted").length === 1 &&
      eventsOf(ops, "message.attempt.failing").length === 1,
    { message: "failing and exhausted told" },
  );
  const [failing] = eventsOf(ops, "message.attempt.failing");
  assert.ok(failing, "failing told after three attempts");
  const data = failing.json!.data as Record<string, unknown>;
  assert.equal(data.destinationId, destinationId);
  assert.match(String(data.lastError), /500/);
  assert.equal(failing.headers.get("webhook-signature"), await expectedSignature(failing));

  const exhausted = eventsOf(ops, "message.attempt.exhausted")[0].json!.data as Record<
    string,
    unknown
  >;
  assert.deepEqual(exhausted.submissionIds, [first]);
  assert.equal(exhausted.count, 1);

  // Two more failures within the hour: grouped, not sent yet.
  const second = await submitAndSettle(h, form.publicKey, { name: PAYLOAD_MARKER });
  const third = await submitAndSettle(h, form.publicKey, { name: PAYLOAD_MARKER });
  await waitFor(async () => (await pendingEvents(h)).some((e) => e.count === 2), {
    message: "second and third grouped",
  });
  const grouped = (await pendingEvents(h)).find((e) => e.type === "message.attempt.exhausted")!;
  assert.deepEqual(grouped.submissionIds, [second, third]);
  assert.ok(grouped.dueAt >= Date.now() + 50 * 60_000, "due when the hour since the last ends");
  await h.service.notifier.runOnce();
  assert.equal(eventsOf(ops, "message.attempt.exhausted").length, 1);
  assert.equal(eventsOf(ops, "message.attempt.failing").length, 1, "told once per episode");

  state.failing = false;
  await submitAndSettle(h, form.publicKey, { name: PAYLOAD_MARKER });
  await waitFor(() => eventsOf(ops, "message.attempt.recovered").length === 1, {
    message: "recovered told",
  });
  assert.ok(!ops.received.some((r) => r.body.includes(PAYLOAD_MARKER)), "no payload field");

  // The log entry is committed right after the receiver's answer.
  const sentList = async () => (await (await h.admin("GET", "/notifications/sent")).json()).sent;
  await waitFor(async () => (await sentList()).length === 3, { message: "three logged" });
  const sent = { sent: await sentList() };
  assert.deepEqual(
    sent.sent.map((s: { type: string; delivered: boolean }) => [s.type, s.delivered]).sort(),
    [
      ["message.attempt.exhausted", true],
      ["message.attempt.failing", true],
      ["message.attempt.recovered", true],
    ],
  );
});

Deno.test("a chat destination is told of others' failures, never of its own; a pause says why and how many are held", async () => {
  await using h = await startHarness({ retryScheduleMs: [20, 20, 20, 20], pauseAfterMs: 60_000 });
  await using ops = startWebhookSink();
  await using slack = startChatReceiver("slack");
  const form = await h.createForm();
  const chatId = await h.addDestination(form.id, { type: "slack", config: { url: slack.url } });
  assert.equal((await putSettings(h, { chat: [chatId], webhook: { url: ops.url } })).status, 200);

  slack.deleted = true; // the service says the webhook is gone: paused at once
  await submitAndSettle(h, form.publicKey, { name: PAYLOAD_MARKER });
  await waitFor(() => eventsOf(ops, "endpoint.disabled").length === 1, { message: "paused told" });
  const data = eventsOf(ops, "endpoint.disabled")[0].json!.data as Record<string, unknown>;
  assert.equal(data.destinationId, chatId);
  assert.match(String(data.reason), /no longer exists/);
  assert.equal(data.held, 1);
  slack.deleted = false;
  await h.service.notifier.runOnce();
  assert.equal(slack.accepted.length, 0, "the paused chat is not told about itself");

  await using broken = startWebhookSink(() => new Response("no", { status: 503 }));
  await h.addDestination(form.id, webhook(broken.url));
  await submitAndSettle(h, form.publicKey, { name: PAYLOAD_MARKER });
  await waitFor(() => slack.accepted.length >= 1, { message: "chat told of the webhook failing" });
  const text = JSON.stringify(slack.accepted);
  assert.match(text, /A destination is failing/);
  assert.ok(!text.includes(PAYLOAD_MARKER));
});

Deno.test("a key rotation is told by email through the platform relay and counts toward its daily cap", async () => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await startHarness({ platformSmtp: platformRelayOf(server) });
    const put = await putSettings(h, { email: { to: ["owner@example.org"], via: "platform" } });
    assert.equal(put.status, 200);
    await confirmAddresses(h, server, 1);
    const rotated = await h.admin("POST", "/keys/rotate");
    assert.equal(rotated.status, 200);
    const { tenantKey } = await rotated.json();
    await server.waitForMessages(2);
    const [, message] = server.messages;
    assert.deepEqual(message.to, ["owner@example.org"]);
    assert.match(message.raw, /Subject: formrelay: A tenant key was rotated/);
    assert.ok(!message.raw.includes(tenantKey), "never the key");
    assert.equal(await relayUsage(h.service.db, h.orgId, Date.now()), 2, "and its confirmation");
  } finally {
    await server.close();
  }
});

Deno.test("a daily summary is queued once per day with the day's figures", async () => {
  await using h = await startHarness();
  await using ops = startWebhookSink();
  assert.equal((await putSettings(h, { webhook: { url: ops.url }, summary: "daily" })).status, 200);
  await h.service.notifier.runOnce();
  await waitFor(() => eventsOf(ops, "summary").length === 1, { message: "summary sent" });
  const data = eventsOf(ops, "summary")[0].json!.data as Record<string, unknown>;
  const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
  assert.equal(data.period, `daily:${yesterday}`);
  assert.deepEqual(Object.keys(data.figures as object).slice(0, 3), [
    "accepted",
    "delivered",
    "failed",
  ]);
});

Deno.test("email goes through the relay of one of the organization's SMTP destinations, to the notification addresses", async () => {
  const server = await startSmtpServer({ mode: "off" });
  try {
    await using h = await startHarness();
    const form = await h.createForm();
    const smtpId = await h.addDestination(form.id, {
      type: "smtp",
      config: {
        host: "127.0.0.1",
        port: server.port,
        secureTransport: "off",
        username: "relay-user",
        password: "relay-pässword",
        from: "forms@tenant.example",
        to: ["sales@tenant.example"],
      },
    });
    const put = await putSettings(h, { email: { to: ["owner@tenant.example"], via: smtpId } });
    assert.equal(put.status, 200);
    await confirmAddresses(h, server, 1);
    assert.deepEqual(server.messages[0].to, ["owner@tenant.example"], "confirmed through it too");
    assert.equal((await h.admin("POST", "/keys/rotate")).status, 200);
    await server.waitForMessages(2);
    const [, message] = server.messages;
    assert.deepEqual(message.to, ["owner@tenant.example"]);
    assert.equal(message.from, "forms@tenant.example");
    assert.equal(message.user, "relay-user");
    assert.match(message.raw, /Subject: formrelay: A tenant key was rotated/);
  } finally {
    await server.close();
  }
});

Deno.test("POST /notifications/test sends one test to each channel at once, bounded per minute", async () => {
  await using h = await startHarness({ testSendLimits: { perDestination: 6, perOrg: 1 } });
  await using ops = startWebhookSink();
  await using slack = startChatReceiver("slack");
  const form = await h.createForm();
  const chatId = await h.addDestination(form.id, { type: "slack", config: { url: slack.url } });
  assert.equal((await putSettings(h, { chat: [chatId], webhook: { url: ops.url } })).status, 200);
  const response = await h.admin("POST", "/notifications/test");
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), { ok: true, queued: 2 });
  await waitFor(() => eventsOf(ops, "test").length === 1 && slack.accepted.length === 1, {
    message: "test on both channels",
  });
  assert.match(JSON.stringify(slack.accepted[0]), /Test notification/);
  const again = await h.admin("POST", "/notifications/test");
  assert.equal(again.status, 429);
  assert.ok(again.headers.get("retry-after"));
  await again.body?.cancel();
});
