/**
 * Notification email addresses are confirmed first: each gets one message with a link,
 * nothing else until the link's page is posted (fetching it confirms nothing); the API
 * shows each as pending or confirmed; removing one forgets it; confirmations count toward
 * the platform relay's caps. Against a real local SMTP server as the platform relay.
 */
import assert from "node:assert/strict";
import { notifyConfirmTokenKey } from "../store/keys.ts";
import { relayUsage } from "../store/relay_usage.ts";
import { sha256Hex } from "../store/sealing.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { confirmationTokenOf, postConfirmation } from "./helpers/notify_confirm.ts";
import { platformRelayOf, startSmtpServer } from "./helpers/smtp_server.ts";
import { waitFor } from "./helpers/wait.ts";

async function addresses(h: Harness) {
  const { notifications } = await (await h.admin("GET", "/notifications")).json();
  return Object.fromEntries(
    notifications.email.addresses.map((a: { address: string; state: string }) => [
      a.address,
      a.state,
    ]),
  );
}

const confirmPage = (h: Harness, token: string) =>
  h.request(`/v1/notifications/confirm?token=${token}`);
Deno.test("notification addresses: one confirmation each, nothing else before the click, then notifications to confirmed ones only", async (t) => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await startHarness({ platformSmtp: platformRelayOf(server) });
    let tenantKey = h.tenantKey;
    const admin = (method: string, path: string, body?: unknown) =>
      h.admin(method, path, body, { tenantKey });
    const subjects = () => server.messages.map((m) => m.raw.match(/^Subject: (.*)$/m)?.[1]);
    let tokenA = "";

    await t.step("each new address gets one confirmation message; both pending", async () => {
      const put = await admin("PUT", "/notifications", {
        email: { to: ["ada@example.org", "bob@example.org"], via: "platform" },
      });
      assert.equal(put.status, 200);
      await server.waitForMessages(2);
      assert.deepEqual(subjects(), [
        "Confirm this address for formrelay notifications",
        "Confirm this address for formrelay notifications",
      ]);
      assert.deepEqual(server.messages.map((m) => m.to).sort(), [["ada@example.org"], [
        "bob@example.org",
      ]]);
      assert.deepEqual(await addresses(h), {
        "ada@example.org": "pending",
        "bob@example.org": "pending",
      });
      tokenA = confirmationTokenOf(server.messages.find((m) => m.to[0] === "ada@example.org")!);
      // Counted like any platform relay message.
      assert.equal(await relayUsage(h.service.db, h.orgId, Date.now()), 2);
      // Saving again (a GET answer sent back) sends nothing more.
      const { notifications } = await (await h.admin("GET", "/notifications")).json();
      assert.equal((await h.admin("PUT", "/notifications", notifications)).status, 200);
    });

    await t.step("nothing but the confirmation before the click: a rotation, a test", async () => {
      const rotated = await admin("POST", "/keys/rotate");
      assert.equal(rotated.status, 200);
      tenantKey = (await rotated.json()).tenantKey;
      const test = await admin("POST", "/notifications/test");
      assert.deepEqual(await test.json(), { ok: true, queued: 0 });
      await h.service.notifier.runOnce();
      assert.equal(server.messages.length, 2);
    });

    await t.step(
      "fetching the link (a mail scanner) shows a button and confirms nothing",
      async () => {
        const page = await confirmPage(h, tokenA);
        assert.equal(page.status, 200);
        const html = await page.text();
        assert.match(html, /<form method="post" action="\/v1\/notifications\/confirm">/);
        assert.match(html, /a\*\*\*@example\.org/);
        assert.equal(page.headers.get("x-frame-options"), "DENY");
        const { notifications } = await (await admin("GET", "/notifications")).json();
        assert.equal(notifications.email.addresses[0].state, "pending");
      },
    );

    await t.step("the click confirms; the link is good once", async () => {
      const posted = await postConfirmation(h, tokenA);
      assert.equal(posted.status, 200);
      assert.match(await posted.text(), /Address confirmed/);
      const { notifications } = await (await admin("GET", "/notifications")).json();
      const states = notifications.email.addresses.map((a: { state: string }) => a.state);
      assert.deepEqual(states, ["confirmed", "pending"]);
      assert.equal((await postConfirmation(h, tokenA)).status, 404);
      assert.equal((await confirmPage(h, tokenA)).status, 404);
      assert.equal((await postConfirmation(h, "x".repeat(43))).status, 404);
    });

    await t.step("notifications go to the confirmed address only", async () => {
      assert.equal((await admin("POST", "/notifications/test")).status, 200);
      await server.waitForMessages(3);
      const last = server.messages[2];
      assert.deepEqual(last.to, ["ada@example.org"]);
      assert.doesNotMatch(last.raw, /bob@example/);
    });

    await t.step("sending again: limited, refused for a confirmed or unknown address", async () => {
      const again = await admin("POST", "/notifications/email/confirmation", {
        address: "BOB@example.org",
      });
      assert.equal(again.status, 429, "a minute apart at least");
      assert.ok(Number(again.headers.get("retry-after")) > 0);
      await again.body?.cancel();
      const confirmed = await admin("POST", "/notifications/email/confirmation", {
        address: "ada@example.org",
      });
      assert.equal(confirmed.status, 409);
      assert.equal((await confirmed.json()).error, "Address already confirmed");
      const unknown = await admin("POST", "/notifications/email/confirmation", {
        address: "eve@example.org",
      });
      assert.equal(unknown.status, 404);
      await unknown.body?.cancel();
    });

    await t.step(
      "removing an address forgets it and its link; added again, it starts over",
      async () => {
        const tokenB = confirmationTokenOf(
          server.messages.find((m) => m.to[0] === "bob@example.org")!,
        );
        const kv = h.service.db.kv;
        assert.notEqual((await kv.get(notifyConfirmTokenKey(await sha256Hex(tokenB)))).value, null);
        const put = await admin("PUT", "/notifications", {
          email: { to: ["ada@example.org"], via: "platform" },
        });
        assert.equal(put.status, 200);
        assert.equal((await kv.get(notifyConfirmTokenKey(await sha256Hex(tokenB)))).value, null);
        assert.equal((await postConfirmation(h, tokenB)).status, 404);
        const readded = await admin("PUT", "/notifications", {
          email: { to: ["ada@example.org", "bob@example.org"], via: "platform" },
        });
        assert.equal(readded.status, 200);
        await server.waitForMessages(4);
        assert.deepEqual(server.messages[3].to, ["bob@example.org"]);
        const { notifications } = await (await admin("GET", "/notifications")).json();
        const states = notifications.email.addresses.map((a: { state: string }) => a.state);
        assert.deepEqual(states, ["confirmed", "pending"], "ada stays confirmed, bob starts over");
        await waitFor(async () => (await relayUsage(h.service.db, h.orgId, Date.now())) === 4, {
          message: "three confirmations and one notification counted",
        });
      },
    );
  } finally {
    await server.close();
  }
});

Deno.test("email notifications need PUBLIC_URL: the link is never built from a request", async () => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await startHarness({ platformSmtp: platformRelayOf(server), publicUrl: null });
    const put = await h.admin("PUT", "/notifications", {
      email: { to: ["ada@example.org"], via: "platform" },
    });
    assert.equal(put.status, 400);
    const body = await put.json();
    assert.deepEqual(body.issues.map((i: { path: string }) => i.path), ["email"]);
    assert.match(body.issues[0].message, /PUBLIC_URL/);
    assert.equal(server.messages.length, 0);
  } finally {
    await server.close();
  }
});
