/**
 * Reliability 8: no tenant turns the running service against third parties. Test
 * sends are bounded (100 in 10 s reach the receiver a few times), the platform relay
 * takes few recipients, a small volume and never the tenant's name as sender, one
 * submission of control characters does not multiply into megabytes, and deliveries
 * past an organization's outbound budget are deferred and then delivered, never lost.
 */
import assert from "node:assert/strict";
import { startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { startSmtpServer } from "../helpers/smtp_server.ts";
import { waitFor } from "../helpers/wait.ts";
import { adminClient, createFormWith, prepareWorkspace } from "./helpers/cluster.ts";

/** 100 test sends over `spanMs` across `destinations`, one every spanMs/100; their statuses. */
async function testSendBurst(
  origin: string,
  tenantKey: string,
  target: { formId: string; destinationIds: string[] },
  spanMs: number,
): Promise<number[]> {
  const started = performance.now();
  const sends = Array.from({ length: 100 }, async (_, i) => {
    // Spreading the load over the span (not synchronisation: nothing waits on it).
    await new Promise((resolve) =>
      setTimeout(resolve, Math.max(0, started + (i * spanMs) / 100 - performance.now()))
    );
    const destId = target.destinationIds[i % target.destinationIds.length];
    const response = await fetch(
      `${origin}/v1/admin/forms/${target.formId}/destinations/${destId}/test`,
      { method: "POST", headers: { "x-tenant-key": tenantKey } },
    );
    const body = await response.json();
    if (response.status === 429) {
      assert.ok(Number(response.headers.get("retry-after")) >= 1, "Retry-After");
      assert.equal(body.retryAfter, Number(response.headers.get("retry-after")));
    } else {
      assert.equal(response.status, 200, JSON.stringify(body));
    }
    return response.status;
  });
  return await Promise.all(sends);
}

Deno.test("the running service does not amplify a tenant's traffic", async (t) => {
  const smtp = await startSmtpServer({ mode: "off", username: "relay", password: "relay-pass" });
  const sink = startWebhookSink();
  const workspace = await prepareWorkspace(2, {
    PLATFORM_SMTP_HOST: "127.0.0.1",
    PLATFORM_SMTP_PORT: String(smtp.port),
    PLATFORM_SMTP_SECURE_TRANSPORT: "off",
    PLATFORM_SMTP_USERNAME: "relay",
    PLATFORM_SMTP_PASSWORD: "relay-pass",
    PLATFORM_SMTP_FROM_EMAIL: "forms@platform.example",
    // A small byte budget per host over a short window, to see deferral end in delivery.
    OUTBOUND_WINDOW_SECONDS: "2",
    OUTBOUND_HOST_BYTES: String(1024 * 1024),
  });
  const [orgA, orgB] = workspace.orgs;
  const service = await startServiceProcess(workspace.env, { stderr: "piped" });
  try {
    const adminA = adminClient(() => service.origin, orgA.tenantKey);
    const adminB = adminClient(() => service.origin, orgB.tenantKey);

    await t.step("100 test sends in 10 s reach the receiver at most 30 times", async () => {
      const form = await createFormWith(adminA, "Test sends", [
        { type: "webhook", config: { url: `${sink.url}/one` } },
        { type: "webhook", config: { url: `${sink.url}/two` } },
        { type: "webhook", config: { url: `${sink.url}/three` } },
        { type: "webhook", config: { url: `${sink.url}/four` } },
      ]);
      const before = sink.hits;
      const statuses = await testSendBurst(service.origin, orgA.tenantKey, form, 10_000);
      const reached = sink.hits - before;
      const accepted = statuses.filter((s) => s === 200).length;
      assert.equal(accepted, reached, "every 200 was one request to the receiver");
      assert.ok(reached >= 1 && reached <= 30, `${reached} of 100 reached the receiver`);
      console.log(`test sends: ${reached} of 100 in 10 s reached the receiver`);
    });

    await t.step(
      "the platform relay takes 5 recipients, a small volume, and its own sender name",
      async () => {
        const form = await adminB("POST", "/forms", { name: "PayPal Security Team" });
        const formId = form.body.form.id;
        const many = await adminB("POST", `/forms/${formId}/destinations`, {
          type: "smtp",
          config: { to: Array.from({ length: 1000 }, (_, i) => `victim${i}@example.org`) },
        });
        assert.equal(many.status, 400);
        assert.equal(many.body.issues[0].path, "config.to");
        const five = await adminB("POST", `/forms/${formId}/destinations`, {
          type: "smtp",
          config: { to: Array.from({ length: 5 }, (_, i) => `victim${i}@example.org`) },
        });
        assert.equal(five.status, 200);
        const statuses = [];
        for (let i = 0; i < 20; i++) {
          const answer = await adminB(
            "POST",
            `/forms/${formId}/destinations/${five.body.destination.id}/test`,
          );
          statuses.push(answer.status);
        }
        const sent = smtp.messages.length;
        // 30 recipients a minute (PLATFORM_SMTP_ORG_PER_MINUTE): six messages of five.
        assert.ok(sent <= 6, `${sent} messages through the platform relay`);
        assert.equal(statuses.filter((s) => s === 200).length, sent);
        assert.ok(statuses.slice(sent).every((s) => s === 429), statuses.join());
        for (const message of smtp.messages) {
          const from = message.raw.split("\r\n").find((line) => line.startsWith("From:")) ?? "";
          assert.match(from, /^From: "Form [0-9a-f]{8} via formrelay" <forms@platform\.example>$/);
        }
        console.log(`platform relay: ${sent} messages (${sent * 5} recipients) of 20 test sends`);
      },
    );

    await t.step(
      "one 128 KB submission of control characters to 20 destinations stays small outbound",
      async () => {
        const form = await createFormWith(
          adminA,
          "Amplifier",
          Array.from({ length: 20 }, (_, i) => ({
            type: "webhook",
            config: { url: `${sink.url}/amp${i}` },
          })),
        );
        const boundary = "amplify";
        const head = `--${boundary}\r\nContent-Disposition: form-data; name="m"\r\n\r\n`;
        const tail = `\r\n--${boundary}--\r\n`;
        const body = head + "\x01".repeat(128 * 1024 - head.length - tail.length) + tail;
        const before = sink.received.length;
        const response = await fetch(`${service.origin}/v1/f/${form.publicKey}`, {
          method: "POST",
          headers: { "content-type": `multipart/form-data; boundary=${boundary}` },
          body,
        });
        assert.equal(response.status, 202);
        await response.body?.cancel();
        await waitFor(() => sink.received.length - before === 20, {
          message: "20 deliveries",
          timeoutMs: 20_000,
        });
        const bytes = sink.received.slice(before).reduce((sum, r) => sum + r.body.length, 0);
        assert.ok(bytes < 20 * 2048, `${bytes} bytes outbound for ${body.length} in`);
        console.log(
          `amplification: ${body.length} bytes in, ${bytes} out to 20 destinations ` +
            `(${(bytes / body.length).toFixed(2)}x)`,
        );
      },
    );

    await t.step(
      "deliveries past the host's byte budget are deferred, then all delivered once",
      async () => {
        const form = await createFormWith(
          adminA,
          "Quotes",
          Array.from({ length: 20 }, (_, i) => ({
            type: "webhook",
            config: { url: `${sink.url}/quote${i}` },
          })),
        );
        // 60 K quotes: JSON writes each as two bytes, about 120 KB a delivery, 2.4 MB in all.
        const payload = { m: '"'.repeat(60 * 1024) };
        const before = sink.received.length;
        const response = await fetch(`${service.origin}/v1/f/${form.publicKey}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(payload),
        });
        const accepted = await response.json();
        assert.equal(response.status, 202, JSON.stringify(accepted));
        const { submissionId } = accepted;
        await waitFor(() => sink.received.length - before >= 20, {
          message: "20 deliveries",
          timeoutMs: 60_000,
        });
        const arrived = sink.received.slice(before);
        assert.equal(arrived.length, 20, "each destination once");
        assert.ok(arrived.every((r) => r.json?.submissionId === submissionId));
        const deferred = service.lines.filter((line) =>
          line.includes('"result":"deferred"') && line.includes(submissionId)
        );
        assert.ok(deferred.length > 0, "some deliveries were deferred");
        console.log(
          `byte budget: 20 deliveries of ~120 KB, ${deferred.length} deferrals on the way`,
        );
      },
    );
  } finally {
    await service.kill("SIGKILL");
    await sink.close();
    await smtp.close();
    await workspace.remove();
  }
});
