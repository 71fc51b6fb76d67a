/**
 * The console says plainly what an owner who keeps no copy of their messages needs, in a
 * real Chromium: a generated secret is shown once with "copy it now", an edit keeps it
 * and the card says signing is on; a destination's name, no pace while it runs at full
 * speed, and what redelivery can and cannot send again; spam rules in observe mode show what they would have
 * caught, with a page sending no page token told apart; a captcha outage is not a bad token.
 */
import assert from "node:assert/strict";
import { getDestination } from "../store/destinations.ts";
import { freePort } from "../tools/ports.ts";
import { AxeBuilder } from "./deps.ts";
import { openConsole } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const BROWSER_MS = 15_000;
/** The pictures of docs/console.md, taken as the test goes. */
const PICTURES = new URL("../docs/screenshots/", import.meta.url);

Deno.test("console: kept secrets, observed spam rules and a captcha outage in plain words", async (t) => {
  await using h = await startHarness({
    captchaVerifyUrl: `http://127.0.0.1:${freePort()}/siteverify`,
  });
  await using api = serveApp(h.service.app);
  await using sink = startWebhookSink();
  await using other = startWebhookSink();
  const form = await h.createForm();
  await using chromium = await openConsole({
    origin: api.origin,
    tenantKey: h.tenantKey,
    timeoutMs: BROWSER_MS,
  });
  const { page, problems } = chromium;
  await page.getByRole("link", { name: "Contact" }).click();
  await page.getByLabel("Minimum seconds on the page").waitFor();

  await t.step("a generated secret says copy it now; an edit of the URL keeps it", async () => {
    await page.getByRole("link", { name: "Destinations" }).click();
    await page.getByRole("button", { name: "Add…" }).click();
    await page.getByLabel("URL", { exact: true }).fill(sink.url);
    await page.getByRole("button", { name: "Generate a secret" }).click();
    await page.getByText("Copy it now: it will not be shown again").waitFor();
    await page.getByRole("button", { name: "Add destination" }).click();
    const card = page.locator("[data-destination]");
    await card.getByText("Signing on").waitFor();
    const id = await card.getAttribute("data-destination") ?? "";
    const stored = async () =>
      (await getDestination(h.service.db, form.id, id))!.config as Record<string, unknown>;
    const secret = (await stored()).secret;
    assert.match(String(secret), /^whsec_/);

    await card.getByRole("button", { name: "Edit" }).click();
    const editor = page.getByRole("form", { name: "Edit destination" });
    await editor.getByText("Leave this empty to keep it").waitFor();
    await editor.getByLabel("URL", { exact: true }).fill(other.url);
    await editor.getByRole("button", { name: "Save" }).click();
    await waitFor(async () => (await stored()).url === other.url, { message: "URL saved" });
    assert.equal((await stored()).secret, secret, "the secret was kept");
    await page.locator("[data-destination]").getByText("Signing on").waitFor();
  });

  await t.step(
    "a named destination, no pace at full speed, and what redelivery can do",
    async () => {
      const card = page.locator("[data-destination]");
      await card.getByRole("button", { name: "Edit" }).click();
      const editor = page.getByRole("form", { name: "Edit destination" });
      await editor.getByLabel("Name (optional)").fill("Sales inbox");
      await editor.getByRole("button", { name: "Save" }).click();
      await card.getByText("Sales inbox · Webhook").waitFor();
      const text = await card.textContent() ?? "";
      assert.doesNotMatch(text, /Pace|in flight|Slowed/, "a pace at full speed is not shown");
      assert.match(text, /Delivered submissions are not kept, so they cannot be sent again/);
      await card.getByRole("button", { name: "Redeliver since" }).click();
      await card.getByText(/0 redelivered\. Delivered submissions are not kept/).waitFor();
      await card.screenshot({ path: new URL("console-destination-card.png", PICTURES).pathname });
    },
  );

  await t.step("spam rules in observe mode show what they would have caught", async () => {
    await page.getByRole("link", { name: "Settings" }).click();
    await page.getByLabel("Minimum seconds on the page").fill("3");
    await page.getByLabel("Observe only (try the rules first)").check();
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByText("Saved.").waitFor();
    const saved = (await (await h.admin("GET", `/forms/${form.id}`)).json()).form;
    assert.deepEqual(saved.spamRules, { minSeconds: 3, observe: true });
    // Two pages on an old snippet: no page token, delivered all the same.
    for (const message of ["one", "two"]) {
      assert.equal((await h.submit(form.publicKey, { message })).status, 202);
    }
    await waitFor(() => other.received.length === 2, { message: "both delivered" });

    await page.getByRole("link", { name: "Deliveries" }).click();
    const region = page.getByRole("region", { name: "Not delivered" });
    await region.getByText("would have caught").waitFor();
    const text = await region.textContent() ?? "";
    assert.match(text, /would have caught, 7 days \(all delivered\): No page token 2/);
    assert.match(text, /2 submissions came without a page token \(delivered/);
    assert.match(text, /update the page with the snippet/);
    await region.screenshot({ path: new URL("console-observed-rules.png", PICTURES).pathname });

    await page.getByRole("link", { name: "Settings" }).click();
    await page.getByText("In the last 7 days these rules would have caught: No page token 2")
      .waitFor();
    const violations = (await new AxeBuilder({ page }).analyze()).violations
      .filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id);
    assert.deepEqual(violations, []);
  });

  await t.step("a destination's pace is shown only while it is slowed, in words", async () => {
    await using slow = startWebhookSink(() =>
      new Response("slow down", { status: 429, headers: { "Retry-After": "120" } })
    );
    await h.addDestination(form.id, {
      type: "webhook",
      name: "Slow receiver",
      config: { url: slow.url },
    });
    assert.equal((await h.submit(form.publicKey, { message: "to the slow one" })).status, 202);
    const path = `/forms/${form.id}/destinations`;
    await waitFor(async () => {
      const { destinations } = await (await h.admin("GET", path)).json();
      return destinations.some((d: { pace: { heldUntil: string | null } | null }) =>
        d.pace?.heldUntil
      );
    }, { message: "the receiver's Retry-After holds it" });
    await page.getByRole("link", { name: "Destinations" }).click();
    const slowCard = page.locator("[data-destination]").filter({ hasText: "Slow receiver" });
    await slowCard.locator(".pace").waitFor();
    assert.match(
      await slowCard.locator(".pace").textContent() ?? "",
      /^Slowed down: the receiver asked to wait, so nothing is sent before .*\.$/,
    );
    const fast = page.locator("[data-destination]").filter({ hasText: "Sales inbox" });
    assert.equal(await fast.locator(".pace").count(), 0);
  });

  await t.step("a captcha provider outage is shown apart from bad tokens", async () => {
    const patched = await h.admin("PATCH", `/forms/${form.id}`, {
      verifyCaptcha: true,
      captchaSecret: "captcha-secret",
    });
    assert.equal(patched.status, 200);
    const response = await h.submit(form.publicKey, { message: "hi" }, {
      "x-captcha-token": "token",
    });
    assert.equal(response.status, 400);
    assert.ok(response.headers.has("retry-after"), "asked to try again");
    await page.getByRole("link", { name: "Deliveries" }).click();
    const row = page.locator('tr[data-reason="captcha_unavailable"]');
    await row.waitFor();
    assert.match(await row.textContent() ?? "", /Captcha service down.*not the visitor's fault/);
    assert.equal(await page.locator('tr[data-reason="captcha"]').count(), 0);
  });
  assert.deepEqual(problems, []);
});
