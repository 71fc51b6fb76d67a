/**
 * Edits keep stored secrets (CONTRACT "Edits keep stored secrets"): a PATCH that leaves a
 * secret out or sends it as shown keeps it, `null` removes it, and answers say which
 * secrets are set.
 */
import assert from "node:assert/strict";
import { getDestination } from "../store/destinations.ts";
import { getForm, openCaptchaSecret } from "../store/forms.ts";
import { expectError } from "./helpers/assert.ts";
import { SMTP_RELAY_CONFIG } from "./helpers/config.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const SECRET = `whsec_${btoa("k".repeat(32))}`;

Deno.test("PATCH of a webhook keeps its signing secret, headers and URL secrets unless told", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const id = await h.addDestination(form.id, {
    type: "webhook",
    config: {
      url: "https://hooks.example.com/in?token=t0ps3cret",
      secret: SECRET,
      headers: { "X-Api-Key": "key-1" },
    },
  });
  const path = `/forms/${form.id}/destinations/${id}`;
  const stored = async () =>
    (await getDestination(h.service.db, form.id, id))!.config as Record<string, unknown>;

  await t.step("a list shows which secrets are set", async () => {
    const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`))
      .json();
    assert.deepEqual(destinations[0].secretsSet, ["url", "headers", "secret"]);
    assert.equal(destinations[0].config.secret, "********");
  });

  await t.step("the config sent back as shown, with a new method, keeps every secret", async () => {
    const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`))
      .json();
    const response = await h.admin("PATCH", path, {
      config: { ...destinations[0].config, method: "PUT" },
    });
    assert.equal(response.status, 200);
    const { destination } = await response.json();
    assert.deepEqual(destination.secretsSet, ["url", "headers", "secret"]);
    assert.deepEqual(await stored(), {
      url: "https://hooks.example.com/in?token=t0ps3cret",
      method: "PUT",
      secret: SECRET,
      headers: { "X-Api-Key": "key-1" },
    });
  });

  await t.step("a new URL with the secret left out keeps the secret", async () => {
    const response = await h.admin("PATCH", path, {
      config: { url: "https://other.example.com/in" },
    });
    assert.equal(response.status, 200);
    const config = await stored();
    assert.equal(config.url, "https://other.example.com/in");
    assert.equal(config.secret, SECRET);
    assert.deepEqual(config.headers, { "X-Api-Key": "key-1" });
  });

  await t.step("a changed URL that still holds hidden parts is refused", async () => {
    const response = await h.admin("PATCH", path, {
      config: { url: "https://third.example.com/in?token=********" },
    });
    const body = await expectError(response, 400, "Validation error");
    assert.equal(body.issues[0].path, "config.url");
    assert.equal((await stored()).url, "https://other.example.com/in");
  });

  await t.step("null removes the secret and the headers", async () => {
    const response = await h.admin("PATCH", path, {
      config: { url: "https://other.example.com/in", secret: null, headers: null },
    });
    assert.equal(response.status, 200);
    const { destination } = await response.json();
    assert.deepEqual(destination.secretsSet, ["url"]);
    const config = await stored();
    assert.equal(config.secret, undefined);
    assert.deepEqual(config.headers, {});
  });
});

Deno.test("PATCH keeps SMTP passwords, sheets auth headers, chat URLs and bot tokens", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const cases: [Record<string, unknown>, Record<string, unknown>, string][] = [
    [
      { type: "smtp", config: SMTP_RELAY_CONFIG },
      { ...SMTP_RELAY_CONFIG, host: "smtp2.example.com", password: "********" },
      "password",
    ],
    [
      {
        type: "sheets_webhook",
        config: { url: "https://script.example.com/exec", authHeader: "Bearer a" },
      },
      { url: "https://script.example.com/exec2" },
      "authHeader",
    ],
    [
      { type: "slack", config: { url: "https://hooks.slack.com/services/T0/B0/secretpath" } },
      { url: "********", template: "New: {{fields.name}}" },
      "url",
    ],
    [
      { type: "telegram", config: { botToken: "123456:ABCdefGhIJKlmNoPQRsTUVwxyZ", chatId: 42 } },
      { chatId: 43 },
      "botToken",
    ],
  ];
  for (const [body, edit, secret] of cases) {
    const id = await h.addDestination(form.id, body);
    const before = (await getDestination(h.service.db, form.id, id))!.config as Record<
      string,
      unknown
    >;
    const response = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
      config: edit,
    });
    assert.equal(
      response.status,
      200,
      `${body.type}: ${JSON.stringify(await response.clone().json())}`,
    );
    const { destination } = await response.json();
    assert.ok(destination.secretsSet.includes(secret), `${body.type} says ${secret} is set`);
    const after = (await getDestination(h.service.db, form.id, id))!.config as Record<
      string,
      unknown
    >;
    assert.equal(after[secret], before[secret], `${body.type} kept ${secret}`);
  }
});

Deno.test("an edited signed webhook still signs its next delivery", async () => {
  await using h = await startHarness();
  await using first = startWebhookSink();
  await using second = startWebhookSink();
  const form = await h.createForm();
  const id = await h.addDestination(form.id, {
    type: "webhook",
    config: { url: first.url, secret: SECRET },
  });
  const { destinations } = await (await h.admin("GET", `/forms/${form.id}/destinations`)).json();
  // What the console sends: the shown config with only the URL changed.
  const edit = { ...destinations[0].config, url: second.url };
  const patched = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, { config: edit });
  assert.equal(patched.status, 200);
  assert.equal((await h.submit(form.publicKey, { name: "Ada" })).status, 202);
  await waitFor(() => second.received.length === 1, { message: "delivery to the new URL" });
  assert.equal(first.received.length, 0);
  assert.match(second.received[0].headers.get("webhook-signature") ?? "", /^v1,/);
});

Deno.test("PATCH of a form keeps its captcha secret for the placeholder and removes it for null", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm({ verifyCaptcha: true, captchaSecret: "captcha-1" });
  const secretOf = async () =>
    await openCaptchaSecret(h.service.db, (await getForm(h.service.db, h.orgId, form.id))!);
  const kept = await h.admin("PATCH", `/forms/${form.id}`, {
    name: "Renamed",
    captchaSecret: "********",
  });
  assert.equal(kept.status, 200);
  assert.equal((await kept.json()).form.hasCaptchaSecret, true);
  assert.equal(await secretOf(), "captcha-1");
  await expectError(
    await h.admin("PATCH", `/forms/${form.id}`, { captchaSecret: null }),
    400,
    "Validation error",
  );
  const removed = await h.admin("PATCH", `/forms/${form.id}`, {
    verifyCaptcha: false,
    captchaSecret: null,
  });
  assert.equal(removed.status, 200);
  assert.equal((await removed.json()).form.hasCaptchaSecret, false);
  assert.equal(await secretOf(), null);
});
