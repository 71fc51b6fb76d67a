import assert from "node:assert/strict";
import { testConfig } from "./helpers/config.ts";
import { outcomeViews } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { platformRelayOf, startSmtpServer, type TestSmtpServer } from "./helpers/smtp_server.ts";
import { waitFor } from "./helpers/wait.ts";

/** A harness whose platform relay (Variant B) is a local SMTP server. */
async function withPlatformRelay(
  server: TestSmtpServer,
  relayLimits: ReturnType<typeof testConfig>["relayLimits"],
) {
  return await startHarness({ relayLimits, platformSmtp: platformRelayOf(server) });
}

const recipients = (n: number) => Array.from({ length: n }, (_, i) => `r${i}@example.org`);

Deno.test("a platform relay destination takes at most PLATFORM_SMTP_MAX_RECIPIENTS addresses; a tenant relay keeps the spec's shape", async () => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await withPlatformRelay(server, {
      ...testConfig().relayLimits,
      maxRecipients: 5,
    });
    const form = await h.createForm();
    const over = await h.admin("POST", `/forms/${form.id}/destinations`, {
      type: "smtp",
      config: { to: recipients(6) },
    });
    assert.equal(over.status, 400);
    assert.deepEqual(await over.json(), {
      ok: false,
      error: "Validation error",
      issues: [{
        path: "config.to",
        message: "The platform relay takes at most 5 recipients (PLATFORM_SMTP_MAX_RECIPIENTS)",
      }],
    });
    const atCap = await h.admin("POST", `/forms/${form.id}/destinations`, {
      type: "smtp",
      config: { to: recipients(5) },
    });
    assert.equal(atCap.status, 200);
    await atCap.body?.cancel();
    const tenantRelay = await h.admin("POST", `/forms/${form.id}/destinations`, {
      type: "smtp",
      config: {
        host: "smtp.tenant.example",
        port: 587,
        username: "u",
        password: "p",
        from: "forms@tenant.example",
        to: recipients(50),
      },
    });
    assert.equal(tenantRelay.status, 200, "Variant A is the tenant's own relay");
    await tenantRelay.body?.cancel();
  } finally {
    await server.close();
  }
});

Deno.test("platform relay mail: test sends and deliveries share the organization's cap, deliveries past it are deferred, the sender name is formrelay's", async () => {
  const server = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  try {
    await using h = await withPlatformRelay(server, {
      maxRecipients: 2,
      orgPerMinute: 4,
      orgPerDay: 1000,
    });
    const form = await h.createForm({ name: "PayPal Security Team" });
    const destId = await h.addDestination(form.id, {
      type: "smtp",
      config: { to: recipients(2) },
    });
    const send = () => h.admin("POST", `/forms/${form.id}/destinations/${destId}/test`);
    const first = await send();
    assert.equal(first.status, 200);
    assert.equal((await first.json()).result.delivered, true);
    const second = await send();
    assert.equal(second.status, 200);
    await second.body?.cancel();
    const third = await send();
    assert.equal(third.status, 429);
    assert.ok(Number(third.headers.get("retry-after")) >= 1);
    const body = await third.json();
    assert.equal(body.error, "Outbound limit reached: try again later");
    assert.equal(body.detail, "the platform relay's limit per minute is reached");
    assert.equal(server.messages.length, 2);
    for (const message of server.messages) {
      const from = message.raw.split("\r\n").find((line) => line.startsWith("From:"));
      assert.equal(
        from,
        `From: "Form ${
          form.id.replaceAll("-", "").slice(0, 8)
        } via formrelay" <forms@platform.example>`,
      );
    }

    // A submission now is deferred, not lost and not failed.
    assert.equal((await h.submit(form.publicKey, { hello: "world" })).status, 202);
    await waitFor(() => h.logs.some((line) => line.includes('"result":"deferred"')), {
      message: "the delivery was deferred",
    });
    const [outcome] = await outcomeViews(h, form.id);
    assert.equal(outcome.status, "retrying");
    assert.match(outcome.lastError ?? "", /^Deferred: the platform relay's limit per minute/);
    assert.equal(outcome.attempts, 0, "a deferral is not an attempt");
    assert.equal(server.messages.length, 2);
  } finally {
    await server.close();
  }
});

Deno.test("a Variant B config stored before the recipient cap still passes the check before delivery", async () => {
  const { createSmtpConnector } = await import("../connectors/smtp.ts");
  const { checkConfig } = await import("../delivery/attempt.ts");
  const connector = createSmtpConnector({
    platform: {
      host: "127.0.0.1",
      port: 25,
      secureTransport: "off",
      username: "u",
      password: "p",
      fromEmail: "forms@platform.example",
    },
    maxPlatformRecipients: 5,
    heloName: "localhost",
    timeoutMs: 1_000,
  });
  try {
    const stored = { to: Array.from({ length: 6 }, (_, i) => `r${i}@example.com`) };
    // Refused when saved now…
    assert.equal(connector.configSchema.safeParse(stored).success, false);
    // …but a submission already accepted for it is not failed for a limit added later.
    const check = checkConfig(connector, stored);
    assert.equal(check.ok, true);
  } finally {
    connector.close();
  }
});
