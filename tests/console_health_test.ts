/**
 * Health where the owner lands, in a real Chromium: the forms list flags a form whose
 * destination is failing or paused, with the reason in words; "Send all waiting now"
 * sends a fixed destination's deliveries waiting for a retry and says how they went; and
 * "Send now" shows its attempt's result instead of "starts in a moment". The pictures of
 * docs/console.md (docs/screenshots/console-forms-flagged.png, console-send-all-waiting.png,
 * console-send-now-result.png) are taken as it goes.
 */
import assert from "node:assert/strict";
import { recordHealth } from "../store/destination_health.ts";
import { openConsole } from "./helpers/chromium.ts";
import { outcomeViews, switchableSink, webhook } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";
import { waitFor } from "./helpers/wait.ts";

const BROWSER_MS = 15_000;
/** The pictures of docs/console.md, taken as the test goes. */
const PICTURES = new URL("../docs/screenshots/", import.meta.url);

Deno.test("console: a failing or paused destination is flagged on the forms list; send all waiting now; send now shows its result", async (t) => {
  await using h = await startHarness({
    retryScheduleMs: [3_600_000, 3_600_000],
    pauseAfterMs: 86_400_000,
  });
  await using api = serveApp(h.service.app);
  const failing = switchableSink(503);
  await using _failing = failing.sink;
  const gone = switchableSink(503);
  await using _gone = gone.sink;

  const contact = await h.createForm({ name: "Contact" });
  await h.addDestination(contact.id, {
    ...webhook(failing.sink.url),
    name: "Sales inbox",
  });
  const quote = await h.createForm({ name: "Quote request" });
  const crmId = await h.addDestination(quote.id, { ...webhook(gone.sink.url), name: "CRM" });
  await h.createForm({ name: "Newsletter" });
  for (const name of ["Ada", "Grace", "Edsger"]) await h.submit(contact.publicKey, { name });
  await h.submit(quote.publicKey, { name: "Alan" });
  await waitFor(async () => {
    const outcomes = [
      ...await outcomeViews(h, contact.id),
      ...await outcomeViews(h, quote.id),
    ];
    return outcomes.length === 4 && outcomes.every((o) => o.status === "retrying");
  }, { message: "four deliveries retrying" });
  // The CRM's service says it is gone: paused at once.
  await recordHealth(
    h.service.db,
    { formId: quote.id, destinationId: crmId },
    { delivered: false, blame: "destination", error: "HTTP 410 from http://127.0.0.1", gone: true },
    { pauseAfterMs: 1, now: Date.now() },
  );

  await using chromium = await openConsole({
    origin: api.origin,
    tenantKey: h.tenantKey,
    timeoutMs: BROWSER_MS,
  });
  const { page, problems } = chromium;

  await t.step(
    "the forms list flags the failing and the paused destination, with why",
    async () => {
      const attention = page.getByRole("region", { name: "Forms needing attention" });
      await attention.waitFor();
      const summary = await attention.textContent() ?? "";
      assert.match(summary, /Contact: Sales inbox \(Webhook\) is failing\./);
      assert.match(summary, /Quote request: CRM \(Webhook\) is paused\./);
      assert.doesNotMatch(summary, /Newsletter/);

      const row = (name: string) => page.locator("li.card.row", { hasText: name });
      const contactRow = await row("Contact").textContent() ?? "";
      assert.match(contactRow, /Destination failing/);
      assert.match(
        contactRow,
        /Sales inbox \(Webhook\) is failing: Failing since \S+ with no delivery in between \(3 failed attempts\); last error: .*503.*\. Its submissions are retried\./,
      );
      const quoteRow = await row("Quote request").textContent() ?? "";
      assert.match(quoteRow, /Destination paused/);
      assert.match(
        quoteRow,
        /CRM \(Webhook\) is paused: The service says this destination no longer exists/,
      );
      assert.match(quoteRow, /New submissions are held until you resume it\./);
      const newsletterRow = await row("Newsletter").textContent() ?? "";
      assert.doesNotMatch(newsletterRow, /Destination (failing|paused)/);
      await page.screenshot({
        path: new URL("console-forms-flagged.png", PICTURES).pathname,
        fullPage: true,
      });
    },
  );

  await t.step("send now waits for its attempt and says how it ended", async () => {
    await page.getByRole("link", { name: "Contact" }).first().click();
    await page.getByRole("link", { name: "Deliveries" }).click();
    const rows = page.locator("tr[data-status=retrying]");
    await rows.first().waitFor();
    assert.equal(await rows.count(), 3);
    // Still failing: the answer is the failed attempt, with its next one.
    await rows.first().getByRole("button", { name: "Send now" }).click();
    const notice = page.locator(".test-outcome");
    await notice.getByText(/^Sent now\. The attempt failed \(HTTP 503\): .*Next attempt /)
      .waitFor();
    assert.doesNotMatch(await notice.textContent() ?? "", /in a moment/);
    assert.equal(failing.sink.hits, 4);
    await page.locator(".test-outcome.bad").waitFor();
    await page.screenshot({
      path: new URL("console-send-now-result.png", PICTURES).pathname,
      fullPage: true,
    });
  });

  await t.step(
    "send all waiting now sends the fixed destination's deliveries and says how they went",
    async () => {
      failing.state.failing = false;
      const waiting = page.getByRole("region", { name: "Waiting for a retry" });
      await waiting.getByText(/Sales inbox · Webhook .* 3 deliveries wait for a retry/).waitFor();
      await waiting.getByRole("button", { name: "Send all waiting now" }).click();
      await page.locator(".test-outcome.ok").getByText("Sent 3 now: 3 delivered.").waitFor();
      await page.locator("tr[data-status=delivered]").nth(2).waitFor();
      assert.equal(await page.locator("tr[data-status=retrying]").count(), 0);
      assert.equal(failing.sink.hits, 7);
      assert.equal(
        await page.getByRole("region", { name: "Waiting for a retry" }).count(),
        0,
        "nothing waits any more",
      );
      await page.screenshot({
        path: new URL("console-send-all-waiting.png", PICTURES).pathname,
        fullPage: true,
      });
    },
  );

  await t.step("once delivering again, the form is no longer flagged", async () => {
    await page.getByRole("link", { name: "Forms" }).first().click();
    await page.getByRole("region", { name: "Forms needing attention" }).getByText("Quote request")
      .waitFor();
    const contactRow = await page.locator("li.card.row", { hasText: "Contact" }).textContent();
    assert.doesNotMatch(contactRow ?? "", /Destination failing/);
  });
  assert.deepEqual(problems, []);
  assert.equal((await outcomeViews(h, contact.id)).length, 3);
});
