/**
 * The console's notifications page in Chromium: choosing a chat destination, a signed
 * operational webhook, the events and the summary; an error shown where it belongs; the
 * secret kept across saves without being shown; what was sent listed. The page is the
 * picture of docs/notifications.md (docs/screenshots/console-notifications.png).
 */
import assert from "node:assert/strict";
import { AxeBuilder } from "./deps.ts";
import { startChatReceiver } from "./helpers/chat_receivers.ts";
import { openConsole } from "./helpers/chromium.ts";
import { submitAndSettle, webhook } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const BROWSER_MS = 15_000;
const PICTURES = new URL("../docs/screenshots/", import.meta.url);
const SECRET = `whsec_${btoa("console-secret-0123456789abcdef")}`;

Deno.test("the console's notifications page: channels, events and summary saved, the secret kept unseen, sent ones listed", async (t) => {
  await using slack = startChatReceiver("slack");
  await using ops = startWebhookSink();
  await using broken = startWebhookSink(() => new Response("no", { status: 500 }));
  await using h = await startHarness({ retryScheduleMs: [20, 20] });
  await using api = serveApp(h.service.app);
  const form = await h.createForm({ name: "Contact" });
  const chatId = await h.addDestination(form.id, { type: "slack", config: { url: slack.url } });
  await using chromium = await openConsole({
    origin: api.origin,
    tenantKey: h.tenantKey,
    timeoutMs: BROWSER_MS,
    viewport: { width: 900, height: 1400 },
  });
  const { page, problems } = chromium;
  await page.getByText("Contact").first().waitFor();
  await page.getByRole("link", { name: "Notifications" }).click();
  const settings = page.getByRole("form", { name: "Notification settings" });
  await settings.waitFor();

  await t.step(
    "email: a platform relay this host lacks is not offered, and the page says what to do",
    async () => {
      // No platform relay here and no SMTP destination with a server of its own: nothing
      // to send through, said beside the field, not preselected to fail on save.
      assert.equal(await settings.getByLabel("Send through").locator("option").count(), 0);
      await settings.getByText(/This deployment has no mail relay of its own/).waitFor();
      await settings.getByLabel("Addresses").fill("owner@example.org");
      await settings.getByRole("button", { name: "Save" }).click();
      await page.locator('[data-error-for="email.via"]').getByText("This field is required")
        .waitFor();
      await settings.getByLabel("Addresses").fill("");
    },
  );

  await t.step(
    "a chat destination, a signed webhook, events and a daily summary are saved",
    async () => {
      await settings.getByLabel(/Slack of “Contact”/).check();
      await settings.getByLabel("URL").fill(ops.url);
      await settings.getByLabel("Signing secret (Standard Webhooks)").fill(SECRET);
      await settings.getByLabel("A tenant key is rotated").uncheck();
      await settings.getByLabel("Summary").selectOption("daily");
      await settings.getByRole("button", { name: "Save" }).click();
      await settings.getByText("Saved.").waitFor();
      const stored = (await (await h.admin("GET", "/notifications")).json()).notifications;
      assert.deepEqual(stored.chat, [chatId]);
      assert.equal(stored.webhook.signed, true);
      assert.ok(!stored.events.includes("tenant_key.rotated"));
      assert.ok(stored.events.includes("message.attempt.failing"));
      assert.equal(stored.summary, "daily");
      assert.equal(
        await settings.getByLabel("Signing secret (Standard Webhooks)").inputValue(),
        "********",
      );
    },
  );

  await t.step("a test goes to each saved channel", async () => {
    await settings.getByRole("button", { name: "Send a test" }).click();
    await settings.getByText(/A test was sent to 2 channel/).waitFor();
    await waitFor(() => ops.received.some((r) => r.json?.type === "test"), { message: "test" });
  });

  await t.step("saved again after a reload, the secret is kept without being shown", async () => {
    await page.reload();
    await settings.waitFor();
    assert.ok(!(await page.content()).includes(SECRET));
    await settings.getByRole("button", { name: "Save" }).click();
    await settings.getByText("Saved.").waitFor();
    const stored = (await (await h.admin("GET", "/notifications")).json()).notifications;
    assert.equal(stored.webhook.signed, true);
  });

  await t.step(
    "a failing destination is told and listed as sent; the page is the docs' picture",
    async () => {
      await h.addDestination(form.id, webhook(broken.url));
      await submitAndSettle(h, form.publicKey, { name: "Ada" });
      await waitFor(
        () => ops.received.some((r) => r.json?.type === "message.attempt.exhausted"),
        {
          message: "exhausted told",
        },
      );
      await waitFor(async () => {
        const { sent } = await (await h.admin("GET", "/notifications/sent")).json();
        return sent.length >= 6; // the tests, failing and exhausted: to the chat and the webhook
      }, { message: "four sent" });
      await page.reload();
      const sent = page.getByRole("region", { name: "Sent notifications" });
      await sent.getByText("Submissions failed for good").first().waitFor();
      assert.equal(await sent.locator(".badge.delivered").count(), 6);
      const violations = (await new AxeBuilder({ page }).include("main").analyze())
        .violations.filter((v) => v.impact === "serious" || v.impact === "critical");
      assert.deepEqual(violations.map((v) => v.id), []);
      await Deno.mkdir(PICTURES, { recursive: true });
      await page.locator("main").screenshot({
        path: new URL("console-notifications.png", PICTURES).pathname,
      });
    },
  );
  await t.step("an SMTP destination with its own server is offered and preselected", async () => {
    await h.addDestination(form.id, {
      type: "smtp",
      config: {
        host: "smtp.example.com",
        port: 587,
        username: "u",
        password: "p",
        from: "forms@example.com",
        to: ["a@example.com"],
      },
    });
    await page.reload();
    const via = settings.getByLabel("Send through");
    await via.locator("option").first().waitFor({ state: "attached" });
    assert.equal(await via.locator("option").count(), 1);
    assert.match(await via.locator("option:checked").textContent() ?? "", /^The relay of SMTP/);
    assert.equal(await settings.getByText(/no mail relay of its own/).count(), 0);
  });
  assert.deepEqual(problems, []);
});
