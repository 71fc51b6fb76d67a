/** A form's own rules end to end: routing by field, spam rules, the confirmation to the visitor. */
import assert from "node:assert/strict";
import { registry } from "../metrics.ts";
import { pageToken, readPageToken, TIME_TRAP_FIELD } from "../rules/spam.ts";
import { UNROUTED_WARNING } from "../routes/ingest.ts";
import { outcomeViews, storedJobs, submitAndSettle, webhook } from "./helpers/deliveries.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";
import { platformRelayOf, startSmtpServer, type TestSmtpServer } from "./helpers/smtp_server.ts";

/** A metric's value for the given labels (metrics are per process: tests compare deltas). */
async function metricValue(name: string, labels: Record<string, string>): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (metric === undefined) return 0;
  const { values } = await metric.get();
  const found = values.find((v) =>
    Object.entries(labels).every(([k, value]) => String(v.labels[k]) === value)
  );
  return found?.value ?? 0;
}

/** The text of a quoted-printable body. */
function decodeQuotedPrintable(body: string): string {
  const bytes: number[] = [];
  const text = body.replace(/=\r\n/g, "");
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "=") {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(text.charCodeAt(i));
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

/** Today's refusal counts of a form, flushed first. */
async function refusalsToday(h: Harness, formId: string) {
  const response = await h.admin("GET", `/forms/${formId}/refusals?days=1`);
  assert.equal(response.status, 200);
  return (await response.json()).days[0];
}

Deno.test("routing: a destination gets only the submissions its conditions hold for; no match is 202, counted and said", async (t) => {
  await using h = await startHarness();
  await using salesSink = startWebhookSink();
  await using supportSink = startWebhookSink();
  const form = await h.createForm();
  const added = await h.admin("POST", `/forms/${form.id}/destinations`, {
    ...webhook(salesSink.url),
    conditions: [{ field: "topic", op: "equals", values: ["sales", "pricing"] }],
  });
  assert.equal(added.status, 200);
  assert.deepEqual((await added.json()).destination.conditions, [
    { field: "topic", op: "equals", values: ["sales", "pricing"] },
  ]);
  await h.addDestination(form.id, {
    ...webhook(supportSink.url),
    conditions: [
      { field: "topic", op: "matches", pattern: "^(support|help)$" },
      { field: "email", op: "present" },
    ],
  });

  await t.step("equals and pattern each reach their own destination", async () => {
    await submitAndSettle(h, form.publicKey, { topic: "pricing", [TIME_TRAP_FIELD]: "1.x" });
    await submitAndSettle(h, form.publicKey, { topic: "Help", email: "a@example.org" });
    assert.equal(salesSink.received.length, 1);
    assert.deepEqual(salesSink.received[0].json!.payload, { topic: "pricing" }, "no page token");
    assert.equal(supportSink.received.length, 1);
    assert.equal((supportSink.received[0].json!.payload as { topic: string }).topic, "Help");
  });

  await t.step(
    "an absent field fails present; no match is 202 with a warning and counted",
    async () => {
      const unroutedBefore = await metricValue("formrelay_submissions_unrouted_total", {});
      const response = await h.submit(form.publicKey, { topic: "help" });
      assert.equal(response.status, 202);
      assert.equal((await response.json()).warning, UNROUTED_WARNING);
      assert.equal((await storedJobs(h)).length, 0);
      assert.equal((await refusalsToday(h, form.id)).nowhere, 1);
      assert.equal(
        await metricValue("formrelay_submissions_unrouted_total", {}),
        unroutedBefore + 1,
      );
      assert.equal(salesSink.received.length + supportSink.received.length, 2);
    },
  );

  await t.step("conditions are validated, listed and changed", async () => {
    const bad = await h.admin("POST", `/forms/${form.id}/destinations`, {
      ...webhook(salesSink.url),
      conditions: [{ field: "topic", op: "matches", pattern: "(a+)+$" }],
    });
    assert.equal(bad.status, 400);
    const body = await bad.json();
    assert.equal(body.error, "Validation error");
    assert.equal(body.issues[0].path, "conditions.0.pattern");
    const listed = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    const sales = listed.destinations.find((d: { config: { url: string } }) =>
      d.config.url === salesSink.url
    );
    const patched = await h.admin("PATCH", `/forms/${form.id}/destinations/${sales.id}`, {
      conditions: [],
    });
    assert.equal(patched.status, 200);
    assert.deepEqual((await patched.json()).destination.conditions, []);
    await submitAndSettle(h, form.publicKey, { topic: "anything" });
    assert.equal(salesSink.received.length, 2, "without conditions it gets everything");
  });
});

Deno.test("spam rules: a caught submission is answered 202 like a honeypot catch, nothing is kept, counted per rule", async (t) => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm({
    spamRules: {
      minSeconds: 3,
      maxLinks: 1,
      blockedWords: ["casino"],
      disposableEmailField: "email",
    },
  });
  assert.deepEqual(form.spamRules, {
    minSeconds: 3,
    maxLinks: 1,
    blockedWords: ["casino"],
    disposableEmailField: "email",
  });
  await h.addDestination(form.id, webhook(sink.url));
  const sealer = h.service.db.sealer;
  const loadedAgo = (ms: number) => pageToken(sealer, form.publicKey, Date.now() - ms);

  await t.step("the page token endpoint signs the time of the page's load", async () => {
    const response = await h.request(`/v1/f/${form.publicKey}/page-token`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
    const body = await response.json();
    assert.equal(body.field, TIME_TRAP_FIELD);
    const [time] = body.token.split(".");
    assert.deepEqual(
      readPageToken(sealer, { publicKey: form.publicKey, token: body.token, now: Date.now() })
        ?.loadedAt,
      Number(time),
    );
    assert.equal((await h.request("/v1/f/nope/page-token")).status, 404);
  });

  const cases: [string, Record<string, unknown>][] = [
    ["no_page_token", { message: "from a page on an old snippet" }],
    ["time_trap", { message: "hi", [TIME_TRAP_FIELD]: loadedAgo(500) }],
    ["time_trap", { message: "hi", [TIME_TRAP_FIELD]: `${Date.now() - 60_000}.forged` }],
    ["links", {
      message: "https://a.example https://b.example",
      [TIME_TRAP_FIELD]: loadedAgo(9000),
    }],
    ["blocked_words", { message: "Best CASINO", [TIME_TRAP_FIELD]: loadedAgo(9000) }],
    ["disposable", { email: "x@mailinator.com", [TIME_TRAP_FIELD]: loadedAgo(9000) }],
  ];
  for (const [rule, payload] of cases) {
    await t.step(`caught by ${rule}`, async () => {
      const before = await metricValue("formrelay_spam_caught_total", { rule });
      const response = await h.submit(form.publicKey, payload);
      assert.equal(response.status, 202);
      const body = await response.json();
      assert.equal(body.ok, true);
      assert.equal(body.warning, undefined, "the bot learns nothing");
      assert.equal((await storedJobs(h)).length, 0);
      assert.equal(await metricValue("formrelay_spam_caught_total", { rule }), before + 1);
    });
  }

  await t.step(
    "counted as spam per day; a person's submission is delivered without the token",
    async () => {
      const today = await refusalsToday(h, form.id);
      assert.equal(today.spam, cases.length);
      assert.deepEqual(today.spamByRule, {
        no_page_token: 1,
        time_trap: 2,
        links: 1,
        blocked_words: 1,
        blocked_patterns: 0,
        disposable: 1,
      });
      assert.equal(Object.values(today.observedByRule).some((n) => n !== 0), false);
      await submitAndSettle(h, form.publicKey, {
        message: "Hello, see https://my.example",
        email: "ada@example.org",
        [TIME_TRAP_FIELD]: loadedAgo(9000),
      });
      assert.equal(sink.received.length, 1);
      const payload = sink.received[0].json!.payload as Record<string, unknown>;
      assert.equal(TIME_TRAP_FIELD in payload, false);
      assert.equal(payload.email, "ada@example.org");
    },
  );

  await t.step("a page token lets one submission through: a reuse is too soon", async () => {
    const token = loadedAgo(9000);
    const before = await metricValue("formrelay_spam_caught_total", { rule: "time_trap" });
    // Concurrent uses, merged commits and other processes: store/submissions_test.ts.
    for (let i = 0; i < 5; i++) {
      const answer = await h.submit(form.publicKey, {
        message: `bot ${i}`,
        [TIME_TRAP_FIELD]: token,
      });
      assert.equal(answer.status, 202, "the bot learns nothing");
      assert.equal((await answer.json()).warning, undefined);
    }
    await waitFor(async () => (await storedJobs(h)).length === 0 && sink.received.length === 2);
    const again = await h.submit(form.publicKey, {
      message: "bot again",
      [TIME_TRAP_FIELD]: token,
    });
    assert.equal(again.status, 202);
    assert.equal((await storedJobs(h)).length, 0, "nothing kept for the reuse");
    assert.equal(sink.received.length, 2, "one of six delivered");
    assert.equal(
      await metricValue("formrelay_spam_caught_total", { rule: "time_trap" }),
      before + 5,
    );
  });

  await t.step(
    "two pages loaded in the same millisecond get tokens of their own: each lets one through",
    async () => {
      const loadedAt = Date.now() - 9000;
      const first = pageToken(sealer, form.publicKey, loadedAt);
      const second = pageToken(sealer, form.publicKey, loadedAt);
      assert.notEqual(first, second);
      const delivered = sink.received.length;
      for (const [i, token] of [first, second, first, second].entries()) {
        const answer = await h.submit(form.publicKey, {
          message: `visitor ${i}`,
          [TIME_TRAP_FIELD]: token,
        });
        assert.equal(answer.status, 202);
      }
      await waitFor(async () =>
        (await storedJobs(h)).length === 0 && sink.received.length === delivered + 2
      );
      const messages = sink.received.slice(delivered).map((r) =>
        (r.json!.payload as Record<string, unknown>).message
      );
      assert.deepEqual(messages.sort(), ["visitor 0", "visitor 1"], "each once, reuses dropped");
    },
  );
});

Deno.test("spam rules in observe mode deliver as usual and count what each rule would have caught", async (t) => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm({
    spamRules: { minSeconds: 3, blockedWords: ["casino"], observe: true },
  });
  await h.addDestination(form.id, webhook(sink.url));
  const loaded = () => pageToken(h.service.db.sealer, form.publicKey, Date.now() - 9000);
  const before = await metricValue("formrelay_spam_caught_total", { rule: "no_page_token" });

  await t.step("each would-be catch is delivered and counted as observed, per rule", async () => {
    await submitAndSettle(h, form.publicKey, { message: "no token: an old snippet" });
    await submitAndSettle(h, form.publicKey, { message: "no token again" });
    await submitAndSettle(h, form.publicKey, { message: "casino", [TIME_TRAP_FIELD]: loaded() });
    await submitAndSettle(h, form.publicKey, { message: "a person", [TIME_TRAP_FIELD]: loaded() });
    assert.equal(sink.received.length, 4);
    const today = await refusalsToday(h, form.id);
    assert.equal(today.spam, 0, "nothing was dropped");
    assert.equal(today.observedByRule.no_page_token, 2);
    assert.equal(today.observedByRule.blocked_words, 1);
    assert.equal(today.observedByRule.time_trap, 0);
    assert.equal(
      await metricValue("formrelay_spam_caught_total", { rule: "no_page_token" }),
      before,
      "observed catches are not spam caught",
    );
  });

  await t.step(
    "turned on, the rules bite, and what they would have caught stays shown",
    async () => {
      const patched = await h.admin("PATCH", `/forms/${form.id}`, {
        spamRules: { minSeconds: 3, blockedWords: ["casino"] },
      });
      assert.equal(patched.status, 200);
      const response = await h.submit(form.publicKey, { message: "no token" });
      assert.equal(response.status, 202);
      assert.equal((await storedJobs(h)).length, 0, "caught: nothing kept");
      const today = await refusalsToday(h, form.id);
      assert.equal(today.spamByRule.no_page_token, 1);
      assert.equal(today.observedByRule.no_page_token, 2);
    },
  );
});

Deno.test("each rule judged alone: observed, a fast post with two links counts for the time trap and the link limit; enforced, once, under the rule that caught it", async (t) => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const rules = { minSeconds: 3, maxLinks: 1 };
  const form = await h.createForm({ spamRules: { ...rules, observe: true } });
  await h.addDestination(form.id, webhook(sink.url));
  const fastWithTwoLinks = () => ({
    message: "see https://a.example and https://b.example",
    [TIME_TRAP_FIELD]: pageToken(h.service.db.sealer, form.publicKey, Date.now() - 1000),
  });

  await t.step("observe mode: both rules counted, the post delivered", async () => {
    await submitAndSettle(h, form.publicKey, fastWithTwoLinks());
    assert.equal(sink.received.length, 1);
    const today = await refusalsToday(h, form.id);
    assert.equal(today.spam, 0);
    assert.equal(today.observedByRule.time_trap, 1);
    assert.equal(today.observedByRule.links, 1);
    assert.equal(today.observedByRule.no_page_token, 0);
  });

  await t.step("enforced: caught once, under the time trap, which judged first", async () => {
    const before = await metricValue("formrelay_spam_caught_total", { rule: "links" });
    const patched = await h.admin("PATCH", `/forms/${form.id}`, { spamRules: rules });
    assert.equal(patched.status, 200);
    assert.equal((await h.submit(form.publicKey, fastWithTwoLinks())).status, 202);
    assert.equal((await storedJobs(h)).length, 0, "caught: nothing kept");
    const today = await refusalsToday(h, form.id);
    assert.equal(today.spam, 1);
    assert.equal(today.spamByRule.time_trap, 1);
    assert.equal(today.spamByRule.links, 0);
    assert.equal(today.observedByRule.links, 1, "the observed days stay shown");
    assert.equal(await metricValue("formrelay_spam_caught_total", { rule: "links" }), before);
  });
});

/** A harness whose platform relay is a local SMTP server. */
async function withRelay(server: TestSmtpServer, overrides = {}) {
  return await startHarness({ platformSmtp: platformRelayOf(server), ...overrides });
}

const CONFIRMATION = {
  emailField: "email",
  subject: "Thanks, {{formName}} got your message",
  text: "We will answer within a day.\n{{fields.message}}",
  echoFields: ["name"],
  replyTo: "owner@tenant.example",
};

Deno.test("confirmation: one per mailbox per 24 h, RFC 3834 headers, only named fields echoed, outcome masked", async (t) => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await withRelay(server);
    await using sink = startWebhookSink();
    const form = await h.createForm({ confirmation: CONFIRMATION, honeypotField: "website" });
    await h.addDestination(form.id, webhook(sink.url));

    await t.step(
      "the visitor gets one confirmation, the form's destination its delivery",
      async () => {
        await submitAndSettle(h, form.publicKey, {
          email: "Ada@Example.org",
          name: "Ada\r\nBcc: victim@example.net " + "x".repeat(500),
          message: "<b>visit https://evil.example</b>",
        });
        assert.equal(sink.received.length, 1);
        assert.equal(server.messages.length, 1);
        const [mail] = server.messages;
        assert.deepEqual(mail.to, ["ada@example.org"]);
        const split = mail.raw.indexOf("\r\n\r\n");
        const [head, body] = [mail.raw.slice(0, split), mail.raw.slice(split + 4)];
        const lines = head.split("\r\n");
        assert.ok(lines.includes("Auto-Submitted: auto-replied"));
        assert.ok(lines.includes("X-Auto-Response-Suppress: All"));
        assert.ok(lines.includes("Reply-To: owner@tenant.example"));
        assert.ok(lines.includes("Subject: Thanks, Contact got your message"));
        assert.ok(!lines.some((line) => line.startsWith("Bcc:")), "no header from a visitor");
        const text = decodeQuotedPrintable(body);
        assert.match(text, /We will answer within a day\./);
        assert.doesNotMatch(text, /evil\.example/, "a field not named to echo never appears");
        assert.match(text, /name: Ada Bcc: victim@example\.net x+…/, "echoed, one line, cut");
        assert.ok(text.length < 1000);
        const outcomes = await outcomeViews(h, form.id);
        const confirmation = outcomes.find((o) => o.destinationId === "confirmation");
        assert.equal(confirmation?.status, "delivered");
        assert.equal(
          (confirmation as { detail?: string } | undefined)?.detail,
          "Confirmation to a***@example.org",
        );
        assert.doesNotMatch(JSON.stringify(outcomes), /ada@example/i);
      },
    );

    await t.step("a second submission with the same address within 24 h gets none", async () => {
      await submitAndSettle(h, form.publicKey, { email: "ada@example.org", name: "Ada" });
      assert.equal(sink.received.length, 2, "the form's own delivery goes on");
      assert.equal(server.messages.length, 1);
    });

    await t.step("the address is kept only as a keyed hash", async () => {
      const keys: string[] = [];
      for await (const entry of h.service.db.kv.list({ prefix: ["confirmation_sent"] })) {
        keys.push(JSON.stringify(entry.key));
      }
      assert.equal(keys.length, 1);
      // Not "ada" alone: the key's form id is hex, and may hold those letters by chance.
      assert.doesNotMatch(keys[0], /ada@|example/i);
    });

    await t.step("a honeypot catch gets no confirmation", async () => {
      const response = await h.submit(form.publicKey, {
        email: "victim@example.net",
        website: "spam",
      });
      assert.equal(response.status, 202);
      assert.equal((await storedJobs(h)).length, 0);
      assert.equal(server.messages.length, 1);
    });
  } finally {
    await server.close();
  }
});

Deno.test("confirmation: one per mailbox, however its address is spelled; sent to the address as typed, in ASCII", async (t) => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await withRelay(server);
    const form = await h.createForm({ confirmation: { ...CONFIRMATION, maxPerHour: 1000 } });
    await t.step("case, +tag and dots: the first spelling gets the only one", async () => {
      const spellings = [
        "victim@example.org",
        "victim+1@example.org",
        "victim+two@example.org",
        "VICTIM+x@example.org",
        "vic.tim@example.org",
      ];
      for (const email of spellings) await submitAndSettle(h, form.publicKey, { email });
      assert.deepEqual(server.messages.map((m) => m.to), [["victim@example.org"]]);
    });
    await t.step(
      "a domain written in Unicode goes out in its IDNA ASCII form, and counts as it",
      async () => {
        await submitAndSettle(h, form.publicKey, { email: "Ada+news@Bücher.example" });
        await submitAndSettle(h, form.publicKey, { email: "ada@xn--bcher-kva.example" });
        assert.equal(server.messages.length, 2);
        const [mail] = server.messages.slice(-1);
        // smtp-server shows a received domain as Unicode. It went as ASCII: the To header
        // says so, and no SMTPUTF8 was asked for (the client does for any other address).
        assert.deepEqual(mail.to, ["ada+news@bücher.example"]);
        assert.equal(mail.smtpUtf8, false);
        assert.ok(mail.raw.includes("\r\nTo: ada+news@xn--bcher-kva.example\r\n"));
      },
    );
    await t.step("Gmail's two domains are one mailbox", async () => {
      await submitAndSettle(h, form.publicKey, { email: "a.lice@gmail.com" });
      await submitAndSettle(h, form.publicKey, { email: "alice+x@googlemail.com" });
      assert.equal(server.messages.length, 3);
    });
  } finally {
    await server.close();
  }
});

Deno.test("confirmation: an address that is not ASCII goes with SMTPUTF8, or fails alone where the relay lacks it", async (t) => {
  for (const offered of [true, false]) {
    await t.step(offered ? "offered" : "not offered", async () => {
      const server = await startSmtpServer({
        mode: "off",
        username: "relay",
        password: "relay-pass",
        hideSmtpUtf8: !offered,
      });
      try {
        await using h = await withRelay(server);
        await using sink = startWebhookSink();
        const form = await h.createForm({ confirmation: CONFIRMATION });
        await h.addDestination(form.id, webhook(sink.url));
        await submitAndSettle(h, form.publicKey, { email: "José@Bücher.example" });
        assert.equal(sink.received.length, 1, "the form's own delivery goes on");
        const outcomes = await outcomeViews(h, form.id);
        const confirmation = outcomes.find((o) => o.destinationId === "confirmation");
        if (offered) {
          assert.equal(confirmation?.status, "delivered");
          assert.equal(server.messages.length, 1);
          assert.deepEqual(server.messages[0].to, ["josé@bücher.example"]);
          assert.ok(server.messages[0].raw.includes("\r\nTo: josé@xn--bcher-kva.example\r\n"));
          assert.equal(server.messages[0].smtpUtf8, true);
        } else {
          assert.equal(confirmation?.status, "failed");
          assert.equal(
            confirmation?.lastError,
            'Confirmation to j***@xn--bcher-kva.example: Cannot deliver to "127.0.0.1:' +
              `${server.port}": the relay does not offer SMTPUTF8, which an address that is ` +
              "not ASCII needs",
          );
          assert.equal(server.messages.length, 0);
        }
      } finally {
        await server.close();
      }
    });
  }
});

Deno.test("confirmation: echoed values are one line in the text and the subject", async () => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await withRelay(server);
    const form = await h.createForm({
      confirmation: {
        ...CONFIRMATION,
        subject: "Thanks {{fields.name}}",
        text: "Hello {{fields.name}},\nwe got it.",
        echoFields: ["name"],
      },
    });
    await submitAndSettle(h, form.publicKey, {
      email: "bob@example.org",
      name: "Bob\r\nBcc: evil@x\n\nReply here\u2028Line\u0085NEL",
    });
    assert.equal(server.messages.length, 1);
    const { raw } = server.messages[0];
    const split = raw.indexOf("\r\n\r\n");
    const [head, body] = [raw.slice(0, split), raw.slice(split + 4)];
    const one = "Bob Bcc: evil@x Reply here Line NEL";
    assert.ok(head.split("\r\n").includes(`Subject: Thanks ${one}`));
    const lines = decodeQuotedPrintable(body).split(/\r\n|\r|\n|\u2028|\u0085/);
    assert.deepEqual(lines.filter((line) => line !== ""), [
      `Hello ${one},`,
      "we got it.",
      `name: ${one}`,
    ]);
  } finally {
    await server.close();
  }
});

Deno.test("confirmation: the hourly cap, and a bot-chosen address gets nothing when the captcha fails", async () => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  const verifier = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json({ success: false }),
  );
  try {
    await using h = await withRelay(server, {
      captchaVerifyUrl: `http://127.0.0.1:${verifier.addr.port}/siteverify`,
    });
    const capped = await h.createForm({ confirmation: { ...CONFIRMATION, maxPerHour: 1 } });
    const limitedBefore = await metricValue("formrelay_confirmations_total", {
      result: "hourly_limit",
    });
    await submitAndSettle(h, capped.publicKey, { email: "one@example.org" });
    await submitAndSettle(h, capped.publicKey, { email: "two@example.org" });
    assert.equal(server.messages.length, 1);
    assert.deepEqual(server.messages[0].to, ["one@example.org"]);
    assert.equal(
      await metricValue("formrelay_confirmations_total", { result: "hourly_limit" }),
      limitedBefore + 1,
    );

    const guarded = await h.createForm({
      confirmation: CONFIRMATION,
      verifyCaptcha: true,
      captchaSecret: "secret",
    });
    const response = await h.submit(guarded.publicKey, { email: "victim@example.net" }, {
      "x-captcha-token": "made-up",
    });
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error, "Invalid captcha token");
    assert.equal((await storedJobs(h)).length, 0);
    const sent = [];
    for await (const entry of h.service.db.kv.list({ prefix: ["confirmation_sent", guarded.id] })) {
      sent.push(entry);
    }
    assert.equal(sent.length, 0, "no slot was used for the victim either");
    assert.equal(server.messages.length, 1);
  } finally {
    await verifier.shutdown();
    await server.close();
  }
});

Deno.test("confirmation: sent through a tenant SMTP destination the tenant names; an unknown relay is refused", async () => {
  const server = await startSmtpServer({
    mode: "off",
    username: "tenant",
    password: "tenant-pass",
  });
  try {
    await using h = await startHarness({ allowPrivateDestinations: true });
    const form = await h.createForm();
    const refused = await h.admin("PATCH", `/forms/${form.id}`, {
      confirmation: { ...CONFIRMATION, via: crypto.randomUUID() },
    });
    assert.equal(refused.status, 400);
    assert.equal((await refused.json()).issues[0].path, "confirmation.via");
    const relayId = await h.addDestination(form.id, {
      type: "smtp",
      config: {
        host: server.hostname,
        port: server.port,
        secureTransport: "off",
        username: "tenant",
        password: "tenant-pass",
        from: "hello@tenant.example",
        to: ["owner@tenant.example"],
      },
    });
    const patched = await h.admin("PATCH", `/forms/${form.id}`, {
      confirmation: { ...CONFIRMATION, via: relayId },
    });
    assert.equal(patched.status, 200);
    await patched.body?.cancel();
    await submitAndSettle(h, form.publicKey, { email: "bea@example.org", name: "Bea" });
    const toVisitor = server.messages.filter((m) => m.to.includes("bea@example.org"));
    const toOwner = server.messages.filter((m) => m.to.includes("owner@tenant.example"));
    assert.equal(toVisitor.length, 1);
    assert.equal(toOwner.length, 1, "the form's own delivery");
    assert.ok(toVisitor[0].raw.includes("\r\nFrom: hello@tenant.example\r\n"));
    assert.equal(toVisitor[0].user, "tenant");
  } finally {
    await server.close();
  }
});

Deno.test("confirmation: a refused address fails alone, masked, and pauses nothing", async () => {
  const server = await startSmtpServer({
    mode: "off",
    username: "relay",
    password: "relay-pass",
    rejectRecipients: { "gone@example.org": 550 },
  });
  try {
    await using h = await withRelay(server, { pauseAfterMs: 1 });
    await using sink = startWebhookSink();
    const form = await h.createForm({ confirmation: CONFIRMATION });
    await h.addDestination(form.id, webhook(sink.url));
    await submitAndSettle(h, form.publicKey, { email: "gone@example.org" });
    assert.equal(sink.received.length, 1, "the form's destination got its delivery");
    const outcomes = await outcomeViews(h, form.id);
    const confirmation = outcomes.find((o) => o.destinationId === "confirmation");
    assert.equal(confirmation?.status, "failed");
    assert.match(confirmation?.lastError ?? "", /^Confirmation to g\*\*\*@example\.org: /);
    assert.doesNotMatch(JSON.stringify(outcomes) + h.logs.join("\n"), /gone@example/);
    const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    assert.equal(destinations[0].health.state, "healthy");
  } finally {
    await server.close();
  }
});

Deno.test("spam rules in observe mode drop nothing: a reused page token is delivered too, and no use is recorded", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm({ spamRules: { minSeconds: 3, observe: true } });
  await h.addDestination(form.id, webhook(sink.url));
  const token = pageToken(h.service.db.sealer, form.publicKey, Date.now() - 9000);
  await submitAndSettle(h, form.publicKey, { message: "first", [TIME_TRAP_FIELD]: token });
  await submitAndSettle(h, form.publicKey, { message: "again", [TIME_TRAP_FIELD]: token });
  assert.equal(sink.received.length, 2);
  const uses = await Array.fromAsync(h.service.db.kv.list({ prefix: ["page_token_uses"] }));
  assert.equal(uses.length, 0);
});
