/**
 * The console's new states in Chromium: notification email addresses pending and
 * confirmed (with the way to send a confirmation again), and the sign-in page of an
 * organization the host disabled. The pictures of docs/notifications.md
 * (docs/screenshots/console-notification-addresses.png, console-org-disabled.png).
 */
import assert from "node:assert/strict";
import { AxeBuilder } from "./deps.ts";
import { setOrgDisabled } from "../store/orgs.ts";
import { openConsole } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { confirmationTokenOf, postConfirmation } from "./helpers/notify_confirm.ts";
import { serveApp } from "./helpers/serve.ts";
import { platformRelayOf, startSmtpServer } from "./helpers/smtp_server.ts";

const BROWSER_MS = 15_000;
const PICTURES = new URL("../docs/screenshots/", import.meta.url);

Deno.test("the console shows each notification address pending or confirmed, and says when the organization is disabled", async (t) => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await startHarness({ platformSmtp: platformRelayOf(server) });
    await using api = serveApp(h.service.app);
    await using chromium = await openConsole({
      origin: api.origin,
      tenantKey: h.tenantKey,
      timeoutMs: BROWSER_MS,
      viewport: { width: 900, height: 900 },
    });
    const { page, problems } = chromium;
    await page.getByRole("link", { name: "Notifications" }).click();
    const settings = page.getByRole("form", { name: "Notification settings" });
    await settings.waitFor();
    const list = settings.getByRole("list", { name: "Confirmation of each address" });

    await t.step("saved addresses are pending until their owners follow the link", async () => {
      await settings.getByLabel("Addresses").fill("ada@example.org\nbob@example.org");
      await settings.getByRole("button", { name: "Save" }).click();
      await settings.getByText("Saved.").waitFor();
      assert.equal(await list.getByText("Pending", { exact: true }).count(), 2);
      await server.waitForMessages(2);
      const ada = server.messages.find((m) => m.to[0] === "ada@example.org")!;
      assert.equal((await postConfirmation(h, confirmationTokenOf(ada))).status, 200);
    });

    await t.step("after a reload: one confirmed, one pending with its button", async () => {
      await page.reload();
      await list.getByText("Confirmed", { exact: true }).waitFor();
      const bob = list.getByRole("listitem").filter({ hasText: "bob@example.org" });
      await bob.getByText(/waiting for its owner to follow the link sent/).waitFor();
      await bob.getByRole("button", { name: "Send the confirmation again" }).click();
      await bob.getByText(/Too many confirmation emails to this address/).waitFor();
      assert.equal(
        await list.getByRole("listitem").filter({ hasText: "ada@example.org" }).getByRole(
          "button",
        ).count(),
        0,
        "a confirmed address has nothing to send again",
      );
      const violations = (await new AxeBuilder({ page }).include("main").analyze())
        .violations.filter((v) => v.impact === "serious" || v.impact === "critical");
      assert.deepEqual(violations.map((v) => v.id), []);
      await Deno.mkdir(PICTURES, { recursive: true });
      await settings.locator("fieldset").first().screenshot({
        path: new URL("console-notification-addresses.png", PICTURES).pathname,
      });
    });

    await t.step(
      "disabled by the host: the console says so, not that the key is wrong",
      async () => {
        await setOrgDisabled(h.service.db, h.orgId, true);
        await page.reload();
        await page.getByText(/Your organization is disabled by the host of this service/).waitFor();
        assert.equal(await page.getByText("Invalid tenant key").count(), 0);
        // Signing in again with the key says the same.
        await page.getByLabel("Tenant key").fill(h.tenantKey);
        await page.getByRole("button", { name: "Sign in" }).click();
        await page.getByText(/Your organization is disabled by the host of this service/).waitFor();
        await page.locator("main").screenshot({
          path: new URL("console-org-disabled.png", PICTURES).pathname,
        });
      },
    );
    assert.deepEqual(problems, []);
  } finally {
    await server.close();
  }
});
