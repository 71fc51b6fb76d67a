/**
 * Logs that tell what happened: each accepted, refused, spam-caught, delivered, failed,
 * paused and resumed event, and each test send, is one line at its level naming the
 * organization, form, destination and submission it is about; never a payload or a
 * webhook URL's path.
 */
import assert from "node:assert/strict";
import { webhook } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

type Line = Record<string, unknown> & { level: string; msg: string };

Deno.test("each submission and delivery event is one line at its level, with its ids", async () => {
  await using h = await startHarness({ pauseAfterMs: 1, retryScheduleMs: [] });
  await using sink = startWebhookSink();
  await using gone = startWebhookSink(() => new Response("gone", { status: 410 }));
  const lines = () => h.logs.map((line) => JSON.parse(line) as Line);
  const find = (msg: string, fields: Record<string, unknown> = {}) =>
    lines().find((line) =>
      line.msg === msg && Object.entries(fields).every(([key, value]) => line[key] === value)
    );
  const line = async (msg: string, fields: Record<string, unknown> = {}) => {
    await waitFor(() => find(msg, fields) !== undefined, {
      message: () => `no "${msg}" ${JSON.stringify(fields)} in:\n${h.logs.join("\n")}`,
    });
    return find(msg, fields)!;
  };
  const form = await h.createForm({
    allowedOrigins: ["https://site.example"],
    honeypotField: "_gotcha",
  });
  const ids = { orgId: h.orgId, formId: form.id };
  const destinationId = await h.addDestination(form.id, webhook(sink.url));
  const site = { origin: "https://site.example" };
  const marker = `marker-${crypto.randomUUID()}`;

  const accepted = await h.submit(form.publicKey, { message: marker }, site);
  assert.equal(accepted.status, 202);
  const { submissionId } = await accepted.json();
  const acceptedLine = await line("submission accepted", { submissionId });
  assert.deepEqual(
    { level: acceptedLine.level, orgId: acceptedLine.orgId, formId: acceptedLine.formId },
    { level: "info", ...ids },
  );
  // One line per accepted submission: it is the request's line too.
  assert.deepEqual([acceptedLine.method, acceptedLine.status, acceptedLine.nowhere], [
    "POST",
    202,
    false,
  ]);
  assert.equal(typeof acceptedLine.ms, "number");
  const acceptedRequests = lines().filter((l) => l.msg === "request" && l.status === 202);
  assert.deepEqual(acceptedRequests, [], "no second line for an accepted submission");
  const delivered = await line("delivery attempt", { submissionId, result: "delivered" });
  assert.equal(delivered.level, "info");
  assert.deepEqual([delivered.orgId, delivered.formId, delivered.destinationId], [
    h.orgId,
    form.id,
    destinationId,
  ]);

  const refused = await h.submit(form.publicKey, { message: marker }, {
    origin: "https://evil.example",
  });
  assert.equal(refused.status, 403);
  await refused.body?.cancel();
  const refusedLine = await line("submission refused", { reason: "origin" });
  assert.deepEqual(
    [refusedLine.level, refusedLine.orgId, refusedLine.formId, refusedLine.status],
    ["debug", h.orgId, form.id, 403],
  );
  const request = lines().findLast((l) => l.msg === "request" && l.status === 403);
  assert.deepEqual([request?.orgId, request?.formId], [h.orgId, form.id], "not only the pk_ path");

  const bot = await h.submit(form.publicKey, { message: marker, _gotcha: "x" }, site);
  assert.equal(bot.status, 202);
  const botId = (await bot.json()).submissionId;
  const caught = await line("submission caught as spam", { submissionId: botId });
  assert.deepEqual([caught.level, caught.rule, caught.orgId, caught.formId], [
    "debug",
    "honeypot",
    h.orgId,
    form.id,
  ]);

  // A destination answering 410: the attempt fails (warn), and it is paused (warn).
  const other = await h.createForm({ name: "Other" });
  const goneId = await h.addDestination(other.id, webhook(`${gone.url}/hook-path-secret`));
  const lost = await h.submit(other.publicKey, { message: marker });
  const lostId = (await lost.json()).submissionId;
  const failed = await line("delivery attempt", { submissionId: lostId });
  assert.equal(failed.level, "warn");
  assert.ok(["retry", "failed"].includes(String(failed.result)), String(failed.result));
  assert.equal(failed.destinationId, goneId);
  // Failing by its own fault for pauseAfterMs (1 ms here): paused at its second failure.
  await h.submit(other.publicKey, { message: marker });
  const paused = await line("destination paused", { destinationId: goneId });
  assert.deepEqual([paused.level, paused.orgId, paused.formId], ["warn", h.orgId, other.id]);
  const resume = await h.admin("POST", `/forms/${other.id}/destinations/${goneId}/resume`);
  assert.equal(resume.status, 200);
  const resumed = await line("destination resumed", { destinationId: goneId });
  assert.deepEqual([resumed.level, resumed.orgId, resumed.formId], ["info", h.orgId, other.id]);

  const test = await h.admin("POST", `/forms/${form.id}/destinations/${destinationId}/test`);
  assert.equal(test.status, 200);
  const sent = await line("test send", { destinationId });
  assert.deepEqual([sent.level, sent.orgId, sent.formId], ["info", h.orgId, form.id]);

  const all = h.logs.join("\n");
  assert.ok(!all.includes(marker), "no payload in the log");
  assert.ok(!all.includes("hook-path-secret"), "no webhook URL path in the log");
});
