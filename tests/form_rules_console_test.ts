/**
 * A form's own rules in the console, in a real Chromium: spam rules and the confirmation
 * on the settings page (with the API's error at its field), the time trap in the snippet,
 * and a destination's routing conditions edited and shown.
 */
import assert from "node:assert/strict";
import { AxeBuilder, type Browser } from "./deps.ts";
import { launchChromium } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const BROWSER_MS = 15_000;

Deno.test("console: spam rules, the confirmation and routing conditions are shown and edited", async (t) => {
  await using h = await startHarness({
    platformSmtp: {
      host: "smtp.platform.example",
      port: 587,
      secureTransport: "starttls",
      username: "relay",
      password: "relay-pass",
      fromEmail: "forms@platform.example",
    },
  });
  await using api = serveApp(h.service.app);
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const problems: string[] = [];
  let browser: Browser | null = null;
  try {
    browser = await launchChromium(BROWSER_MS);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(BROWSER_MS);
    const page = await context.newPage();
    page.on("pageerror", (error) => problems.push(`pageerror: ${error.message}`));
    const readForm = async () => (await (await h.admin("GET", `/forms/${form.id}`)).json()).form;

    await page.goto(`${api.origin}/`);
    await page.getByLabel("Tenant key").fill(h.tenantKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("link", { name: "Contact" }).click();
    await page.getByLabel("Minimum seconds on the page").waitFor();

    await t.step("a refused pattern is shown at its field; valid rules are saved", async () => {
      await page.getByLabel("Minimum seconds on the page").fill("3");
      await page.getByLabel("Blocked patterns").fill("(a+)+$");
      await page.getByRole("button", { name: "Save" }).click();
      const error = page.locator('[data-error-for="spamRules.blockedPatterns"]');
      await waitFor(async () => (await error.textContent()) !== "");
      assert.match(await error.textContent() ?? "", /repeated group/);
      await page.getByLabel("Blocked patterns").fill("\\bcasino\\b");
      await page.getByLabel("Send a confirmation").check();
      await page.getByLabel("Fields to repeat to the visitor").fill("name");
      await page.getByLabel("Reply-To").fill("owner@tenant.example");
      await page.getByRole("button", { name: "Save" }).click();
      await page.getByText("Saved.").waitFor();
      const saved = await readForm();
      assert.deepEqual(saved.spamRules, { minSeconds: 3, blockedPatterns: ["\\bcasino\\b"] });
      assert.equal(saved.confirmation.emailField, "email");
      assert.equal(saved.confirmation.via, "platform");
      assert.deepEqual(saved.confirmation.echoFields, ["name"]);
      assert.equal(saved.confirmation.replyTo, "owner@tenant.example");
      const violations = (await new AxeBuilder({ page }).analyze()).violations
        .filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id);
      assert.deepEqual(violations, []);
    });

    await t.step("the snippet carries the time trap", async () => {
      await page.getByRole("link", { name: "Snippet" }).click();
      const snippet = await page.locator("#snippet-fetch").textContent() ?? "";
      assert.ok(snippet.includes('name="_formrelay_loaded"'), snippet);
      assert.ok(snippet.includes(`/v1/f/${form.publicKey}/page-token`), snippet);
    });

    await t.step("a destination's conditions are edited and shown", async () => {
      await page.getByRole("link", { name: "Destinations" }).click();
      await page.getByRole("button", { name: "Add…" }).click();
      await page.getByLabel("URL", { exact: true }).fill(sink.url);
      await page.getByLabel("Only when").fill("topic = sales, pricing\nphone present");
      await page.getByRole("button", { name: "Add destination" }).click();
      const card = page.locator("[data-destination]");
      await card.waitFor();
      assert.match(
        await card.textContent() ?? "",
        /Only when: topic = sales, pricing · phone present/,
      );
      const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`))
        .json();
      assert.deepEqual(destinations[0].conditions, [
        { field: "topic", op: "equals", values: ["sales", "pricing"] },
        { field: "phone", op: "present" },
      ]);
    });
    assert.deepEqual(problems, []);
  } finally {
    await browser?.close();
  }
});
