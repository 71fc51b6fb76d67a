/**
 * The chat editors of the console in Chromium: each service's own words and "where do I
 * get this" line, a message preview for the sample submission, a test send to a local
 * receiver. The previews are the pictures of docs/delivery.md (docs/screenshots/chat-*.png).
 */
import assert from "node:assert/strict";
import { AxeBuilder, type Browser } from "./deps.ts";
import { type ChatService, startChatReceiver } from "./helpers/chat_receivers.ts";
import { launchChromium } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";

const BROWSER_MS = 15_000;
const PICTURES = new URL("../docs/screenshots/", import.meta.url);

/** Each editor's first field and the words that say where its value comes from. */
const EDITORS: Record<ChatService, { label: string; where: RegExp }> = {
  slack: { label: "Incoming webhook URL", where: /Incoming Webhooks/ },
  discord: { label: "Webhook URL", where: /Copy Webhook URL/ },
  teams: { label: "Workflow webhook URL", where: /Workflows/ },
  telegram: { label: "Bot token", where: /@BotFather/ },
};

Deno.test("the console's chat editors: the service's words, a preview of the message, a test send", async (t) => {
  await using slack = startChatReceiver("slack");
  await using telegram = startChatReceiver("telegram");
  await using h = await startHarness({ telegramApiUrl: telegram.url });
  await using api = serveApp(h.service.app);
  const form = await h.createForm({ name: "Contact" });
  let browser: Browser | null = null;
  try {
    browser = await launchChromium(BROWSER_MS);
    const context = await browser.newContext({ viewport: { width: 900, height: 900 } });
    context.setDefaultTimeout(BROWSER_MS);
    const page = await context.newPage();
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(error.message));
    await page.goto(`${api.origin}/`);
    await page.getByLabel("Tenant key").fill(h.tenantKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByText("Contact").first().waitFor();
    await page.goto(`${api.origin}/#/forms/${form.id}/destinations`);
    await page.getByLabel("Add a destination").waitFor();

    for (const service of ["slack", "discord", "teams", "telegram"] as const) {
      await t.step(`${service}: its words, and a preview that is the docs' picture`, async () => {
        await page.getByLabel("Add a destination").selectOption(service);
        await page.getByRole("button", { name: "Add…" }).click();
        const editor = page.locator("form.editor");
        await editor.getByLabel(EDITORS[service].label, { exact: true }).waitFor();
        assert.match(await editor.locator(".where").textContent() ?? "", EDITORS[service].where);
        await editor.getByLabel("Message template").waitFor();
        await editor.getByRole("button", { name: "Preview message" }).click();
        const preview = editor.getByRole("figure", { name: "Message preview" });
        await preview.getByText("Ada Lovelace").first().waitFor();
        assert.ok((await preview.textContent())?.includes("Contact"));
        const violations = (await new AxeBuilder({ page }).include("form.editor").analyze())
          .violations.filter((v) => v.impact === "serious" || v.impact === "critical");
        assert.deepEqual(violations.map((v) => v.id), []);
        await Deno.mkdir(PICTURES, { recursive: true });
        await preview.screenshot({ path: new URL(`chat-${service}.png`, PICTURES).pathname });
      });
    }

    await t.step(
      "a bad placeholder shows at the template; a Slack destination is added and tested",
      async () => {
        await page.getByLabel("Add a destination").selectOption("slack");
        await page.getByRole("button", { name: "Add…" }).click();
        const editor = page.locator("form.editor");
        await editor.getByLabel("Incoming webhook URL").fill(slack.url);
        await editor.getByLabel("Message template").fill("New: {{fields.name}} {{oops}}");
        await editor.getByRole("button", { name: "Preview message" }).click();
        await page.locator('[data-error-for="config.template"]').getByText(/line 1, column 22/)
          .waitFor();
        await editor.getByLabel("Message template").fill("New: {{fields.name}}");
        await editor.getByRole("button", { name: "Add destination" }).click();
        const card = page.locator("[data-destination]");
        await card.waitFor();
        assert.match(await card.locator("h2").textContent() ?? "", /^Slack/);
        await card.getByRole("button", { name: "Send test" }).click();
        await card.getByText(/^Test delivered \(200\)/).waitFor();
        assert.equal(slack.accepted.length, 1);
      },
    );
    assert.deepEqual(problems, []);
  } finally {
    await browser?.close();
  }
});
