/**
 * Rotation in the console (Chromium): a webhook destination's signing secret and the
 * operational webhook's, each shown once and verifying real deliveries beside the old
 * one; the tenant key rotated with an overlap, the page saying when the old key stops.
 */
import assert from "node:assert/strict";
import { StandardWebhook } from "./deps.ts";
import { openConsole } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";
import { type Received, startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";
import { newSigningSecret } from "../connectors/signing.ts";

const BROWSER_MS = 15_000;

/** Whether the Standard Webhooks verifier accepts what was received with `secret` alone. */
function verifies(secret: string, received: Received): boolean {
  try {
    new StandardWebhook(secret).verify(received.body, Object.fromEntries(received.headers));
    return true;
  } catch {
    return false;
  }
}

Deno.test("the console rotates signing secrets and the tenant key with an overlap", async (t) => {
  await using h = await startHarness();
  await using api = serveApp(h.service.app);
  await using sink = startWebhookSink();
  await using ops = startWebhookSink();
  const form = await h.createForm({ name: "Contact" });
  const old = newSigningSecret();
  await h.addDestination(form.id, { type: "webhook", config: { url: sink.url, secret: old } });
  const put = await h.admin("PUT", "/notifications", { webhook: { url: ops.url, secret: old } });
  assert.equal(put.status, 200);
  await using chromium = await openConsole({
    origin: api.origin,
    tenantKey: h.tenantKey,
    timeoutMs: BROWSER_MS,
  });
  const { page, problems } = chromium;
  await page.getByText("Contact").first().waitFor();

  await t.step("a destination's secret: shown once, both secrets verify", async () => {
    await page.goto(`${api.origin}/#/forms/${form.id}/destinations`);
    await page.getByRole("button", { name: "Rotate signing secret" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.textContent() ?? "", /old and with the new secret/);
    await dialog.getByRole("button", { name: "Rotate secret" }).click();
    const shown = page.getByLabel("New signing secret");
    await shown.waitFor();
    const secret = await shown.inputValue();
    assert.match(secret, /^whsec_/);
    await page.getByText(/Deliveries carry both signatures until/).waitFor();
    await page.getByText(/The previous signing secret signs too until/).waitFor();
    assert.equal((await h.submit(form.publicKey, { name: "Ada" })).status, 202);
    await waitFor(() => sink.received.length === 1, { message: "delivered" });
    assert.ok(verifies(secret, sink.received[0]) && verifies(old, sink.received[0]));
    // Shown once: gone when the page is opened again.
    await page.reload();
    await page.getByRole("button", { name: "Rotate signing secret" }).waitFor();
    assert.equal(await page.getByLabel("New signing secret").count(), 0);
    assert.ok(!(await page.content()).includes(secret));
  });

  await t.step("the operational webhook's secret: shown once, both secrets verify", async () => {
    await page.getByRole("link", { name: "Notifications" }).click();
    // The page changes once its data has come, and the form's page has a rotate button too.
    await page.getByRole("heading", { level: 1, name: "Notifications" }).waitFor();
    await page.getByRole("button", { name: "Rotate signing secret" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Rotate secret" }).click();
    const shown = page.getByLabel("New signing secret");
    await shown.waitFor();
    const secret = await shown.inputValue();
    assert.equal((await h.admin("POST", "/notifications/test")).status, 200);
    await waitFor(() => ops.received.some((r) => r.json?.type === "test"), { message: "test" });
    const test = ops.received.find((r) => r.json?.type === "test")!;
    assert.ok(verifies(secret, test) && verifies(old, test));
  });

  await t.step(
    "the tenant key with 24 hours of overlap: the page says when the old stops",
    async () => {
      await page.getByRole("link", { name: "Tenant key" }).click();
      await page.getByLabel("Old keys stop").selectOption("24");
      await page.getByRole("button", { name: "Rotate key" }).click();
      assert.match(await page.getByRole("dialog").textContent() ?? "", /keeps working until/);
      await page.getByRole("dialog").getByRole("button", { name: "Rotate key" }).click();
      const shown = page.getByLabel("New tenant key");
      await shown.waitFor();
      const newKey = await shown.inputValue();
      await page.getByText(/The old key keeps working until/).waitFor();
      assert.equal((await h.admin("GET", "/forms")).status, 200, "the old key still works");
      assert.equal((await h.admin("GET", "/forms", undefined, { tenantKey: newKey })).status, 200);
      // The console goes on with the new key.
      await page.getByRole("link", { name: "Forms" }).click();
      await page.getByText("Contact").first().waitFor();
    },
  );
  assert.deepEqual(problems, []);
});
