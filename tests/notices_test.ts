/**
 * Owner notices as a job kind of their own, against real local peers: fair between
 * organizations (one tenant's hanging channel holds nobody else's notice), never in a
 * chat digest of submissions, and worded by formrelay: an email and a chat notice give
 * the status code, the host, the form and destination by name and the first failed
 * attempt's time, never a receiver's own words.
 */
import assert from "node:assert/strict";
import { createOrg } from "../store/orgs.ts";
import { startChatReceiver } from "./helpers/chat_receivers.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { platformRelayOf, startSmtpServer } from "./helpers/smtp_server.ts";
import { confirmAddresses } from "./helpers/notify_confirm.ts";
import { waitFor } from "./helpers/wait.ts";

/** A receiver that accepts connections and requests and never answers, until closed. */
function startHangingReceiver() {
  const release = Promise.withResolvers<void>();
  let hits = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async () => {
    hits++;
    await release.promise;
    return new Response("late");
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}/ops`,
    hits: () => hits,
    async [Symbol.asyncDispose]() {
      release.resolve();
      await server.shutdown();
    },
  };
}

Deno.test("an organization's 20 notices to a webhook that never answers leave another organization's test notice arriving within 2 s", async () => {
  await using h = await startHarness({ testSendLimits: { perDestination: 100, perOrg: 100 } });
  await using hanging = startHangingReceiver();
  await using ops = startWebhookSink();
  const put = await h.admin("PUT", "/notifications", { webhook: { url: hanging.url } });
  assert.equal(put.status, 200);
  for (let i = 0; i < 20; i++) {
    const queued = await h.admin("POST", "/notifications/test");
    assert.equal(queued.status, 200);
    await queued.body?.cancel();
  }
  // The hanging channel holds its own lane: a few of its notices are in flight.
  await waitFor(() => hanging.hits() >= 1, { message: "the hanging webhook was reached" });

  const other = await createOrg(h.service.db, "Other org");
  const putOther = await h.admin("PUT", "/notifications", { webhook: { url: ops.url } }, {
    tenantKey: other.tenantKey,
  });
  assert.equal(putOther.status, 200);
  const test = await h.admin("POST", "/notifications/test", undefined, {
    tenantKey: other.tenantKey,
  });
  assert.equal(test.status, 200);
  await test.body?.cancel();
  await waitFor(() => ops.received.some((r) => r.json?.type === "test"), {
    timeoutMs: 2000,
    message: "the other organization's test notice arrived within 2 s",
  });
  assert.ok(hanging.hits() <= 2, `at most 2 in flight on the hanging lane, saw ${hanging.hits()}`);
});

Deno.test("a chat destination that takes submissions and notices gets each notice on its own, never in a digest or worded as a submission", async () => {
  await using h = await startHarness({ testSendLimits: { perDestination: 100, perOrg: 100 } });
  await using slack = startChatReceiver("slack");
  // Slow enough that submissions wait and are joined into digests.
  slack.perSecond = 1;
  const form = await h.createForm();
  const chatId = await h.addDestination(form.id, { type: "slack", config: { url: slack.url } });
  assert.equal((await h.admin("PUT", "/notifications", { chat: [chatId] })).status, 200);
  for (let i = 0; i < 6; i++) {
    assert.equal((await h.submit(form.publicKey, { name: `visitor ${i}` })).status, 202);
    if (i === 2) {
      const test = await h.admin("POST", "/notifications/test");
      assert.equal(test.status, 200);
      await test.body?.cancel();
    }
  }
  const texts = () => slack.accepted.map((message) => JSON.stringify(message));
  const submissionsSeen = () =>
    texts().reduce((sum, text) => sum + (text.match(/visitor \d/g)?.length ?? 0), 0);
  await waitFor(
    () => submissionsSeen() === 6 && texts().some((t) => t.includes("Test notification")),
    { message: () => `six submissions and the notice arrived: ${texts().join("\n")}` },
  );
  const notices = texts().filter((text) => text.includes("Test notification"));
  assert.equal(notices.length, 1);
  assert.ok(!/visitor|submission/i.test(notices[0]), `a notice alone: ${notices[0]}`);
  assert.equal(
    (slack.accepted.find((m) => JSON.stringify(m) === notices[0]) as { text: string }).text,
    "formrelay: Test notification",
  );
  for (const text of texts().filter((t) => t.includes("visitor"))) {
    assert.ok(!text.includes("formrelay:"), `no notice inside a submission message: ${text}`);
  }
});

Deno.test("a failing SMTP destination is told by email and chat in formrelay's words: status code, host, form, first failure; never the receiver's text", async () => {
  const RECEIVER_TEXT =
    "5.7.1 URGENT: your mailbox is suspended. Restore access at http://phish.example";
  const tenantRelay = await startSmtpServer({
    mode: "off",
    refuseMail: { code: 554, text: RECEIVER_TEXT },
  });
  const platform = await startSmtpServer({
    mode: "off",
    username: "relay",
    password: "relay-pass",
  });
  try {
    await using h = await startHarness({
      retryScheduleMs: [20, 20],
      pauseAfterMs: 0,
      platformSmtp: platformRelayOf(platform),
      publicUrl: "https://forms.example.com",
      notify: { failingAfterAttempts: 1, groupMs: 3_600_000, summary: "off" },
    });
    await using slack = startChatReceiver("slack");
    const form = await h.createForm({ name: "Contact" });
    const chatId = await h.addDestination(form.id, { type: "slack", config: { url: slack.url } });
    await h.addDestination(form.id, {
      type: "smtp",
      config: {
        host: "127.0.0.1",
        port: tenantRelay.port,
        secureTransport: "off",
        username: "relay-user",
        password: "relay-pässword",
        from: "forms@tenant.example",
        to: ["sales@tenant.example"],
      },
    });
    const put = await h.admin("PUT", "/notifications", {
      email: { to: ["owner@tenant.example"], via: "platform" },
      chat: [chatId],
      events: ["message.attempt.failing", "message.attempt.exhausted"],
    });
    assert.equal(put.status, 200);
    // The owner follows the address's confirmation link first; only then is it told.
    await confirmAddresses(h, platform, 1);
    const before = Date.now();
    assert.equal((await h.submit(form.publicKey, { name: "Ada" })).status, 202);
    // A 554 is permanent: the submission fails for good at once, and the destination is
    // failing (NOTIFY_FAILING_AFTER_ATTEMPTS 1 here).
    await platform.waitForMessages(3);
    const chats = () =>
      slack.accepted.map((m) => JSON.stringify(m)).filter((t) => t.includes("formrelay:"));
    await waitFor(() => chats().length === 2, { message: "both chat notices arrived" });
    const mails = platform.messages.slice(1).map((m) => m.raw.replace(/=\r\n/g, ""));
    const host = `127.0.0.1:${tenantRelay.port}`;
    for (const text of [...mails, ...chats()]) {
      assert.ok(!text.includes("URGENT"), `no receiver words: ${text}`);
      assert.ok(!text.includes("phish"), `no receiver link: ${text}`);
      assert.match(text, /SMTP 554/, "the status code");
      assert.ok(text.includes(host), "the host");
      assert.match(text, /Contact/, "the form by name");
    }
    const failing = mails.find((m) => /^Subject: .*is failing/m.test(m))!;
    assert.ok(failing, "the failing email");
    assert.ok(
      mails.some((m) => /^Subject: .*failed for good/m.test(m)),
      "the failed-for-good email",
    );
    for (const mail of mails) {
      assert.match(mail, /Content-Type: multipart\/alternative/);
      assert.match(mail, /Content-Type: text\/html/);
      assert.ok(!/Payload:|Submission ID:|Origin:/.test(mail), "not worded as a submission");
    }
    assert.ok(
      failing.includes(`https://forms.example.com/#/forms/${form.id}/destinations`),
      "links to the console",
    );
    // Since the first failed attempt: the second of the submission, not of the notice.
    const since = /failing since (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC/.exec(failing)![1];
    const sinceMs = Date.parse(since.replace(" ", "T") + "Z");
    assert.ok(sinceMs >= Math.floor(before / 1000) * 1000 && sinceMs <= Date.now());
    // The receiver's words stay where the owner looks for details: the sent list and the API.
    const deliveries = await (await h.admin("GET", `/forms/${form.id}/deliveries`)).text();
    assert.ok(deliveries.includes("URGENT"), "the API keeps the receiver's words");
  } finally {
    await tenantRelay.close();
    await platform.close();
  }
});
