import assert from "node:assert/strict";
import { testConfig } from "./helpers/config.ts";
import { outcomeViews, webhook } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

Deno.test("deliveries past the organization's outbound budget are deferred, then all delivered once", async () => {
  const base = testConfig();
  await using h = await startHarness({
    outbound: { ...base.outbound, windowMs: 1000, hostRequests: 2 },
  });
  await using sink = startWebhookSink();
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(sink.url));
  const ids = [];
  for (let i = 0; i < 6; i++) {
    const response = await h.submit(form.publicKey, { n: i });
    assert.equal(response.status, 202);
    ids.push((await response.json()).submissionId);
  }
  await waitFor(async () => {
    const outcomes = await outcomeViews(h, form.id);
    return outcomes.length === 6 && outcomes.every((o) => o.status === "delivered");
  }, { message: "all six delivered", timeoutMs: 20_000 });
  assert.equal(sink.hits, 6, "each once");
  assert.deepEqual(
    sink.received.map((r) => r.json!.submissionId).sort(),
    ids.sort(),
  );
  const deferred = h.logs.filter((line) => line.includes('"result":"deferred"'));
  assert.ok(deferred.length > 0, "some were deferred");
  assert.ok(deferred.every((line) => line.includes("request limit for")));
  // A deferral is not an attempt.
  for (const outcome of await outcomeViews(h, form.id)) assert.equal(outcome.attempts, 1);
});

Deno.test("a multipart submission of control characters does not grow sixfold per destination", async () => {
  await using h = await startHarness();
  await using sink = startWebhookSink();
  const form = await h.createForm();
  for (let i = 0; i < 3; i++) await h.addDestination(form.id, webhook(sink.url));
  const boundary = "xyz";
  const controls = "\x01\x02\x1b\x7f".repeat(30_000); // 120 000 bytes, DEL included
  const body = [
    `--${boundary}`,
    'Content-Disposition: form-data; name="message"',
    "",
    `keep\ttabs\r\nand lines${controls}`,
    `--${boundary}--`,
    "",
  ].join("\r\n");
  const response = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": `multipart/form-data; boundary=${boundary}` },
    body,
  });
  assert.equal(response.status, 202);
  await response.body?.cancel();
  await waitFor(() => sink.received.length === 3, { message: "three deliveries" });
  const sent = sink.received.reduce((sum, r) => sum + r.body.length, 0);
  // Only DEL (0x7f, one byte in JSON) is left of the control characters.
  const payload = sink.received[0].json!.payload as Record<string, string>;
  assert.equal(payload.message, `keep\ttabs\r\nand lines${"\x7f".repeat(30_000)}`);
  assert.ok(
    sent < 3 * 32_000,
    `${sent} bytes sent for a ${body.length}-byte body to 3 destinations`,
  );
});
