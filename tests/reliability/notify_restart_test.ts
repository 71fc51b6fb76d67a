/**
 * Owner notifications survive a restart: with the owner's operational webhook down, a
 * destination starts failing and a key is rotated; the notifications fail their first
 * attempts, the service is SIGKILLed, the webhook comes back, and the restarted service
 * (same KV file) sends both, signed. The webhook's URL path and secret are never in the
 * KV file or the logs in plaintext.
 */
import { standardWebhookSignature } from "../helpers/signature.ts";
import assert from "node:assert/strict";
import { startServiceProcess } from "../helpers/process.ts";
import { type Received, startWebhookSink } from "../helpers/sink.ts";
import { waitFor } from "../helpers/wait.ts";
import {
  adminClient,
  createFormWith,
  findPlaintext,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";

const SECRET = `whsec_${btoa("restart-secret-0123456789abcdef")}`;

/** The signature of what a receiver got, as it checks it. */
function signatureOf(received: Received): Promise<string> {
  return standardWebhookSignature(SECRET, received);
}

Deno.test("notifications that could not be sent before a SIGKILL are sent after the restart", async () => {
  const workspace = await prepareWorkspace(1);
  const pathMarker = `ops-path-${crypto.randomUUID()}`;
  // The owner's webhook: a port taken and let go, so that it is down until restarted there.
  const probe = startWebhookSink();
  const port = Number(new URL(probe.url).port);
  await probe.close();
  await using broken = startWebhookSink(() => new Response("down", { status: 500 }));
  const logs: string[] = [];
  const first = await startServiceProcess(workspace.env, { stderr: "piped" });
  let second: Awaited<ReturnType<typeof startServiceProcess>> | null = null;
  try {
    let origin = first.origin;
    const admin = adminClient(() => origin, workspace.orgs[0].tenantKey);
    const form = await createFormWith(admin, "Notified", [{
      type: "webhook",
      config: { url: broken.url },
    }]);
    const put = await admin("PUT", "/notifications", {
      webhook: { url: `http://127.0.0.1:${port}/${pathMarker}`, secret: SECRET },
    });
    assert.equal(put.status, 200, put.text);
    assert.equal((await submit(origin, form.publicKey, { name: "Ada" })).status, 202);
    assert.equal((await admin("POST", "/keys/rotate")).status, 200);

    const failedSends = (lines: string[], type: string) =>
      lines.some((line) => line.includes('"msg":"notification failed"') && line.includes(type));
    await waitFor(
      () =>
        failedSends(first.lines, "message.attempt.failing") &&
        failedSends(first.lines, "tenant_key.rotated"),
      { timeoutMs: 30_000, message: "both notifications tried and failed" },
    );
    await first.kill("SIGKILL");
    logs.push(...first.lines, ...first.stderrLines);

    await using ops = startWebhookSink(undefined, { port });
    second = await startServiceProcess(workspace.env, { stderr: "piped" });
    origin = second.origin;
    const types = () => new Set(ops.received.map((r) => r.json?.type));
    await waitFor(
      () => types().has("message.attempt.failing") && types().has("tenant_key.rotated"),
      {
        timeoutMs: 30_000,
        message: () => `notifications after the restart: ${[...types()].join(", ")}`,
      },
    );
    for (const received of ops.received) {
      assert.equal(received.path, `/${pathMarker}`);
      assert.equal(received.headers.get("webhook-signature"), await signatureOf(received));
    }
    const failing = ops.received.find((r) => r.json?.type === "message.attempt.failing")!;
    assert.equal((failing.json!.data as { formId: string }).formId, form.formId);
    await second.kill("SIGTERM");
    logs.push(...second.lines, ...second.stderrLines);
    second = null;
    assert.deepEqual(await findPlaintext(pathMarker, { dir: workspace.dir, logs }), []);
    assert.deepEqual(await findPlaintext(SECRET, { dir: workspace.dir, logs }), []);
  } finally {
    await first.kill("SIGKILL");
    await second?.kill("SIGKILL");
    await workspace.remove();
  }
});
