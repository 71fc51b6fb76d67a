/**
 * Chat destinations end to end: added through the admin API (secrets redacted, templates
 * checked), delivered to local receivers that behave as the services do, a deleted
 * webhook pausing its destination at once with the submission held, and test sends.
 */
import assert from "node:assert/strict";
import { type ChatService, startChatReceiver } from "./helpers/chat_receivers.ts";
import { destinationView, outcomeViews, submitAndSettle } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { waitFor } from "./helpers/wait.ts";

const TOKEN = "123456789:AAEabcdefghijklmnopqrstuvwxyz012345";

function configFor(service: ChatService, url: string): Record<string, unknown> {
  return service === "telegram" ? { botToken: TOKEN, chatId: "@formrelay_test" } : { url };
}

Deno.test("each chat type is added, shown without its secret, and delivers to its service", async () => {
  const receivers = (["slack", "discord", "teams", "telegram"] as const).map(startChatReceiver);
  try {
    const telegram = receivers[3];
    await using h = await startHarness({ telegramApiUrl: telegram.url });
    const form = await h.createForm({ name: "Contact" });
    for (const receiver of receivers) {
      const service =
        (["slack", "discord", "teams", "telegram"] as const)[receivers.indexOf(receiver)];
      await h.addDestination(form.id, { type: service, config: configFor(service, receiver.url) });
    }
    const listed = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    const text = JSON.stringify(listed);
    assert.ok(!text.includes("secretpath") && !text.includes(TOKEN), text);
    assert.equal(listed.destinations[0].config.url, "********");
    assert.equal(listed.destinations[3].config.botToken, "********");

    await submitAndSettle(h, form.publicKey, { name: "Ada", message: "Hello <!channel>" });
    for (const receiver of receivers) {
      assert.equal(receiver.accepted.length, 1, receiver.refused.join());
      assert.ok(JSON.stringify(receiver.accepted[0]).includes("Ada"));
    }
    const outcomes = await outcomeViews(h, form.id);
    assert.deepEqual(outcomes.map((o) => o.status), Array(4).fill("delivered"));
    // Nothing of the secrets or the payload in the log.
    const logs = h.logs.join("\n");
    assert.ok(
      !logs.includes("secretpath") && !logs.includes(TOKEN) && !logs.includes("<!channel>"),
    );
  } finally {
    for (const receiver of receivers) await receiver[Symbol.asyncDispose]();
  }
});

Deno.test("an unknown placeholder is 400 Validation error naming where it is", async () => {
  await using h = await startHarness();
  const form = await h.createForm();
  const response = await h.admin("POST", `/forms/${form.id}/destinations`, {
    type: "slack",
    config: { url: "http://127.0.0.1:9/x", template: "Hi {{formName}}\n{{nope}}" },
  });
  assert.equal(response.status, 400);
  const body = await response.json();
  assert.equal(body.error, "Validation error");
  const issue = body.issues.find((i: { path: string }) => /template/i.test(i.path));
  assert.ok(issue, JSON.stringify(body));
  assert.match(issue.message, /\{\{nope\}\}.*line 2, column 1/);
});

Deno.test("an SMTP subject is the spec's (any text of one character or more): unknown placeholders stay as written", async () => {
  await using h = await startHarness();
  const form = await h.createForm();
  const response = await h.admin("POST", `/forms/${form.id}/destinations`, {
    type: "smtp",
    config: {
      host: "127.0.0.1",
      port: 25,
      username: "u",
      password: "p",
      from: "f@example.com",
      to: ["a@example.com"],
      subjectTemplate: "{{formName}} {{other}} {{x",
    },
  });
  assert.equal(response.status, 200);
  const preview = await h.admin("POST", `/forms/${form.id}/destinations/preview`, {
    type: "smtp",
    config: { subjectTemplate: "{{formName}} {{other}} {{x" },
  });
  assert.equal(preview.status, 200);
  assert.match(JSON.stringify(await preview.json()), /\{\{other\}\} \{\{x/);
});

for (const service of ["slack", "discord", "telegram"] as const) {
  Deno.test(`${service}: a deleted webhook or lost chat pauses its destination at once; the submission is held`, async () => {
    await using receiver = startChatReceiver(service);
    // A day of failing would be needed otherwise.
    await using h = await startHarness({
      telegramApiUrl: receiver.url,
      pauseAfterMs: 24 * 3600_000,
    });
    const form = await h.createForm();
    const id = await h.addDestination(form.id, {
      type: service,
      config: configFor(service, receiver.url),
    });
    receiver.deleted = true;
    await submitAndSettle(h, form.publicKey);
    const view = await destinationView(h, form.id, id);
    assert.equal(view.health.state, "paused");
    assert.match(
      view.health.reason ?? "",
      /^The service says this destination no longer exists/,
    );
    assert.ok(!(view.health.reason ?? "").includes("secretpath"));
    const [outcome] = await outcomeViews(h, form.id);
    assert.equal(outcome.status, "held", "held, not lost");
    // Back in service and resumed: the held submission arrives once.
    receiver.deleted = false;
    const resumed = await h.admin("POST", `/forms/${form.id}/destinations/${id}/resume`);
    assert.equal(resumed.status, 200);
    await waitFor(() => receiver.accepted.length === 1, { message: "held submission delivered" });
  });
}

Deno.test("a test send reaches the chat service, and says why when it cannot", async () => {
  await using receiver = startChatReceiver("discord");
  await using h = await startHarness();
  const form = await h.createForm();
  const id = await h.addDestination(form.id, { type: "discord", config: { url: receiver.url } });
  const sent = await (await h.admin("POST", `/forms/${form.id}/destinations/${id}/test`)).json();
  assert.equal(sent.result.delivered, true);
  assert.equal(sent.result.statusCode, 204);
  assert.equal(receiver.accepted.length, 1);
  receiver.deleted = true;
  const failed = await (await h.admin("POST", `/forms/${form.id}/destinations/${id}/test`)).json();
  assert.equal(failed.result.delivered, false);
  assert.match(failed.result.error, /404: Unknown Webhook/);
});

Deno.test("a preview shows the message for a sample submission from unsaved values, and checks the template", async () => {
  await using h = await startHarness();
  const form = await h.createForm({ name: "Contact" });
  const preview = (body: unknown) =>
    h.admin("POST", `/forms/${form.id}/destinations/preview`, body);
  const slack =
    await (await preview({ type: "slack", config: { template: "New: {{fields.name}}" } }))
      .json();
  assert.equal(slack.sample.payload.name, "Ada Lovelace");
  assert.equal(slack.message.blocks[1].text.text, "New: Ada Lovelace");
  const telegram = await (await preview({ type: "telegram", config: {} })).json();
  assert.match(telegram.message.text, /^<b>Contact<\/b>\n\n<b>name:<\/b> Ada Lovelace/);
  const smtp = await (await preview({ type: "smtp", config: { subjectTemplate: "{{formName}}!" } }))
    .json();
  assert.deepEqual(smtp.message, { subject: "Contact!" });
  const bad = await preview({ type: "discord", config: { template: "{{fields.}}" } });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).issues[0].path, "config.template");
});

Deno.test("a burst of 100 submissions to Slack, which takes one message a second, arrives complete in digests within a minute", async () => {
  await using receiver = startChatReceiver("slack");
  receiver.perSecond = 1;
  await using h = await startHarness({ rateLimit: { max: 0, windowMs: 600_000 } });
  const form = await h.createForm({ name: "Contact" });
  await h.addDestination(form.id, { type: "slack", config: { url: receiver.url } });
  const started = Date.now();
  for (let i = 0; i < 100; i++) {
    const response = await h.submit(form.publicKey, { name: `Visitor ${i}` });
    assert.equal(response.status, 202);
  }
  /** Each visitor's name as the messages carry it: every submission, once. */
  const arrived = () =>
    receiver.accepted.flatMap((message) => JSON.stringify(message).match(/Visitor \d+/g) ?? []);
  await waitFor(() => arrived().length >= 100, {
    timeoutMs: 60_000,
    message: () => `${arrived().length} of 100 arrived in ${receiver.accepted.length} messages`,
  });
  assert.equal(new Set(arrived()).size, 100, "each submission once");
  assert.equal(arrived().length, 100);
  assert.ok(receiver.accepted.length < 100, `${receiver.accepted.length} messages`);
  const outcomes = await waitForOutcomes(h, form.id, 100);
  assert.ok(outcomes.every((o) => o.status === "delivered"), "each its own outcome, delivered");
  assert.ok(Date.now() - started < 60_000);
});

/** The form's outcomes once `count` of them are final. */
async function waitForOutcomes(
  h: Awaited<ReturnType<typeof startHarness>>,
  formId: string,
  count: number,
) {
  let outcomes: Awaited<ReturnType<typeof outcomeViews>> = [];
  await waitFor(async () => {
    outcomes = await outcomeViews(h, formId);
    return outcomes.filter((o) => o.status === "delivered").length >= count;
  }, { timeoutMs: 10_000, message: "outcomes recorded" });
  return outcomes;
}
