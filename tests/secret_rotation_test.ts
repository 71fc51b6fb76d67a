/**
 * Signing secret rotation with an overlap (an addition beyond the spec), end to end: a
 * webhook destination's secret and the operational webhook's, rotated through the API,
 * each delivery checked by the real Standard Webhooks and Svix verifiers with each
 * secret alone. The service's clock is moved (never slept on) to be past a grace.
 */
import assert from "node:assert/strict";
import { StandardWebhook, SvixWebhook } from "./deps.ts";
import { expectError } from "./helpers/assert.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { type Received, startWebhookSink, type WebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";
import { newSigningSecret } from "../connectors/signing.ts";
import { REDACTED } from "../connectors/types.ts";

const HOUR = 3_600_000;

/** Whether both verifiers accept what the receiver got with `secret` alone. */
function verifies(secret: string, received: Received): boolean {
  const headers = Object.fromEntries(received.headers);
  const results = [new StandardWebhook(secret), new SvixWebhook(secret)].map((verifier) => {
    try {
      verifier.verify(received.body, headers);
      return true;
    } catch {
      return false;
    }
  });
  assert.equal(results[0], results[1], "the two verifiers agree");
  return results[0];
}

/** Submits once and returns the delivery the sink got. */
async function deliveredOnce(h: Harness, sink: WebhookSink, publicKey: string) {
  const before = sink.received.length;
  assert.equal((await h.submit(publicKey, { name: "Ada" })).status, 202);
  await waitFor(() => sink.received.length > before, { message: "delivered" });
  return sink.received[before];
}

Deno.test("a destination's signing secret rotates with a grace: both sign, then the new alone", async (t) => {
  // The service's clock: rotations take their time from it, deliveries sign at real time.
  let clock = Date.now();
  await using h = await startHarness({}, { now: () => clock });
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const old = newSigningSecret();
  const id = await h.addDestination(form.id, {
    type: "webhook",
    config: { url: sink.url, secret: old },
  });
  const path = `/forms/${form.id}/destinations/${id}`;
  let current = "";

  await t.step("rotate: the new secret once, and until when the old one signs", async () => {
    const response = await h.admin("POST", `${path}/rotate-secret`);
    assert.equal(response.status, 200);
    const body = await response.json();
    assert.equal(body.ok, true);
    assert.match(body.secret, /^whsec_/);
    assert.notEqual(body.secret, old);
    assert.equal(body.previousValidUntil, new Date(clock + 24 * HOUR).toISOString());
    current = body.secret;
  });

  await t.step("the list says until when, and never shows either secret", async () => {
    const list = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    const [shown] = list.destinations;
    assert.equal(shown.previousSecretValidUntil, new Date(clock + 24 * HOUR).toISOString());
    assert.equal(shown.config.secret, REDACTED);
    assert.equal("previousSecrets" in shown.config, false);
    const text = JSON.stringify(list);
    assert.ok(!text.includes(old) && !text.includes(current));
  });

  await t.step("during the grace each delivery verifies with either secret alone", async () => {
    const received = await deliveredOnce(h, sink, form.publicKey);
    assert.equal(received.headers.get("webhook-signature")!.split(" ").length, 2);
    assert.ok(verifies(current, received), "the new secret");
    assert.ok(verifies(old, received), "the old secret");
    assert.ok(!verifies(newSigningSecret(), received), "not any secret");
  });

  await t.step("an edit that keeps the secret keeps the overlap", async () => {
    const patched = await h.admin("PATCH", path, {
      config: { url: sink.url, headers: { "x-edited": "yes" }, secret: REDACTED },
    });
    assert.equal(patched.status, 200);
    const received = await deliveredOnce(h, sink, form.publicKey);
    assert.equal(received.headers.get("x-edited"), "yes");
    assert.ok(verifies(old, received) && verifies(current, received));
  });

  await t.step("an edit that replaces the secret ends the overlap at once", async () => {
    const rotated = await (await h.admin("POST", `${path}/rotate-secret`, { graceHours: 168 }))
      .json();
    assert.equal(rotated.previousValidUntil, new Date(clock + 168 * HOUR).toISOString());
    const replacement = newSigningSecret();
    const patched = await h.admin("PATCH", path, {
      config: { url: sink.url, secret: replacement },
    });
    assert.equal(patched.status, 200);
    const received = await deliveredOnce(h, sink, form.publicKey);
    assert.ok(verifies(replacement, received));
    assert.ok(!verifies(rotated.secret, received));
    assert.ok(!verifies(current, received));
    assert.ok(!verifies(old, received));
    current = replacement;
  });

  await t.step("after the grace only the new secret verifies", async () => {
    // Rotated 25 hours ago (by the service's clock) with the default 24 hours: deliveries
    // (at real time) are an hour past its grace.
    clock = Date.now() - 25 * HOUR;
    const previous = current;
    const rotated = await (await h.admin("POST", `${path}/rotate-secret`)).json();
    assert.ok(Date.parse(rotated.previousValidUntil) < Date.now());
    clock = Date.now();
    const received = await deliveredOnce(h, sink, form.publicKey);
    assert.equal(received.headers.get("webhook-signature")!.split(" ").length, 1);
    assert.ok(verifies(rotated.secret, received));
    assert.ok(!verifies(previous, received));
    const list = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    assert.equal(list.destinations[0].previousSecretValidUntil, null);
  });
});

Deno.test("rotate-secret refuses what it cannot do with the contract's errors", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const hook = await h.addDestination(form.id, {
    type: "webhook",
    config: { url: "https://hooks.example.com/in" },
  });
  const sheet = await h.addDestination(form.id, {
    type: "sheets_webhook",
    config: { url: "https://script.example.com/exec" },
  });
  const rotate = (destination: string, body?: unknown, formId = form.id) =>
    h.admin("POST", `/forms/${formId}/destinations/${destination}/rotate-secret`, body);

  await t.step("a grace over 7 days, negative or not a number: 400 Validation error", async () => {
    for (const graceHours of [169, -1, "24"]) {
      const response = await rotate(hook, { graceHours });
      const body = await expectError(response, 400, "Validation error");
      assert.equal(body.issues[0].path, "graceHours");
    }
    await expectError(await rotate(hook, { grace: 1 }), 400, "Validation error");
  });
  await t.step("a type without a signing secret: 400", async () => {
    const body = await expectError(await rotate(sheet), 400, "Validation error");
    assert.match(body.issues[0].message, /no signing secret/);
  });
  await t.step("unknown destination or form: 404", async () => {
    await expectError(await rotate("nope"), 404, "Destination not found");
    await expectError(await rotate(hook, undefined, "nope"), 404, "Form not found");
  });
  await t.step("a webhook without a secret gets its first one, nothing earlier signs", async () => {
    const response = await rotate(hook);
    assert.equal(response.status, 200);
    const body = await response.json();
    assert.match(body.secret, /^whsec_/);
    assert.equal(body.previousValidUntil, null);
    const list = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
    const shown = list.destinations.find((d: { id: string }) => d.id === hook);
    assert.deepEqual(shown.secretsSet, ["url", "secret"]);
  });
});

Deno.test("the operational webhook's secret rotates with a grace: both sign, then the new alone", async (t) => {
  let clock = Date.now();
  await using h = await startHarness({}, { now: () => clock });
  await using ops = startWebhookSink();
  const old = newSigningSecret();
  const put = await h.admin("PUT", "/notifications", { webhook: { url: ops.url, secret: old } });
  assert.equal(put.status, 200);
  const tests = () => ops.received.filter((r) => r.json?.type === "test");
  const testOnce = async () => {
    const before = tests().length;
    assert.equal((await h.admin("POST", "/notifications/test")).status, 200);
    await waitFor(() => tests().length > before, { message: "test notification" });
    return tests()[before];
  };
  let current = "";

  await t.step("no webhook set: 400", async () => {
    await using bare = await startHarness({}, { deliver: false });
    const response = await bare.admin("POST", "/notifications/webhook/rotate-secret");
    const body = await expectError(response, 400, "Validation error");
    assert.equal(body.issues[0].path, "webhook");
  });

  await t.step("rotate: the new secret once, the settings say until when", async () => {
    const response = await h.admin("POST", "/notifications/webhook/rotate-secret", {
      graceHours: 2,
    });
    assert.equal(response.status, 200);
    const body = await response.json();
    assert.equal(body.previousValidUntil, new Date(clock + 2 * HOUR).toISOString());
    current = body.secret;
    const settings = await (await h.admin("GET", "/notifications")).json();
    assert.equal(settings.notifications.webhook.previousSecretValidUntil, body.previousValidUntil);
    assert.equal(settings.notifications.webhook.secret, REDACTED);
    assert.ok(!JSON.stringify(settings).includes(current));
  });

  await t.step("during the grace a notice verifies with either secret alone", async () => {
    const received = await testOnce();
    assert.ok(verifies(current, received));
    assert.ok(verifies(old, received));
  });

  await t.step("a GET answer sent back keeps the secret and the overlap", async () => {
    const settings = await (await h.admin("GET", "/notifications")).json();
    assert.equal((await h.admin("PUT", "/notifications", settings.notifications)).status, 200);
    const received = await testOnce();
    assert.ok(verifies(current, received) && verifies(old, received));
  });

  await t.step("a secret replaced by hand ends the overlap at once", async () => {
    const replacement = newSigningSecret();
    const put = await h.admin("PUT", "/notifications", {
      webhook: { url: ops.url, secret: replacement },
    });
    assert.equal(put.status, 200);
    assert.equal((await put.json()).notifications.webhook.previousSecretValidUntil, null);
    const received = await testOnce();
    assert.ok(verifies(replacement, received));
    assert.ok(!verifies(current, received) && !verifies(old, received));
    current = replacement;
  });

  await t.step("after the grace only the new secret verifies", async () => {
    // Rotated 3 hours ago (by the service's clock) with 2 hours of grace.
    clock = Date.now() - 3 * HOUR;
    const previous = current;
    const rotated = await h.admin("POST", "/notifications/webhook/rotate-secret", {
      graceHours: 2,
    });
    current = (await rotated.json()).secret;
    clock = Date.now();
    const received = await testOnce();
    assert.ok(verifies(current, received));
    assert.ok(!verifies(previous, received));
  });
});
