import assert from "node:assert/strict";
import { startHarness } from "./helpers/harness.ts";

/** The issues of a `400 Validation error` answer, as `path: message` lines. */
async function issuesOf(response: Response): Promise<string[]> {
  assert.equal(response.status, 400);
  const body = await response.json();
  assert.equal(body.error, "Validation error");
  return body.issues.map((i: { path: string; message: string }) => `${i.path}: ${i.message}`);
}

Deno.test("validation errors are plain words per field, not the validator's texts", async (t) => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();

  await t.step("forms", async () => {
    assert.deepEqual(await issuesOf(await h.admin("POST", "/forms", { name: "" })), [
      "name: This field is required",
    ]);
    assert.deepEqual(
      await issuesOf(
        await h.admin("POST", "/forms", { allowedOrigins: ["example.com"], colour: "red" }),
      ),
      [
        "name: This field is required",
        "allowedOrigins.0: Enter a full web address like https://www.example.com",
        ": This field is not known: colour (check the spelling)",
      ],
    );
    assert.deepEqual(
      await issuesOf(await h.admin("PATCH", `/forms/${form.id}`, { verifyCaptcha: "yes" })),
      ["verifyCaptcha: Enter true or false here"],
    );
  });

  await t.step("destinations", async () => {
    const add = (body: unknown) => h.admin("POST", `/forms/${form.id}/destinations`, body);
    assert.deepEqual(
      await issuesOf(await add({ type: "webhook", config: { url: "x", method: "GET" } })),
      [
        "config.url: Enter a full web address like https://www.example.com",
        "config.method: Choose one of: POST, PUT, PATCH",
      ],
    );
    const smtp = {
      host: "smtp.example.com",
      port: 0,
      username: "",
      password: "p",
      from: "forms@example.com",
      to: ["ada@example.com", "not an address"],
    };
    assert.deepEqual(await issuesOf(await add({ type: "smtp", config: smtp })), [
      "config.port: Enter 1 or more",
      "config.username: This field is required",
      "config.to.1: Enter an email address like name@example.com",
    ]);
    assert.deepEqual(
      await issuesOf(
        await add({ type: "smtp", config: { ...smtp, port: 25, to: [], username: "u" } }),
      ),
      ["config.to: Add at least one entry"],
    );
  });
});

/** Verbs a sentence of ours is made with (a message with none is a fragment). */
const VERB = /\b(is|are|has|have|can|cannot|enter|give|add|choose|use|send|check|takes)\b/i;

/**
 * A whole sentence, as the house writes messages: a capital first, a verb (not "Required"
 * or "At least 1"), three words or more, and no trailing period or dangling colon.
 */
function isWholeSentence(message: string): boolean {
  return /^[A-Z]/.test(message) && VERB.test(message) &&
    message.trim().split(/\s+/).length >= 3 && !/[.:,]$/.test(message);
}

Deno.test("every validation message is a whole sentence", async (t) => {
  await using h = await startHarness({ platformSmtp: null }, { deliver: false });
  const form = await h.createForm();
  const smtp = {
    host: "smtp.example.com",
    port: 25,
    username: "u",
    password: "p",
    from: "forms@example.com",
    to: ["ada@example.com"],
  };
  const refusals: [string, string, unknown][] = [
    ["POST", "/forms", { name: "", allowedOrigins: "x", colour: 1, extra: 2 }],
    ["POST", "/forms", { name: "x".repeat(500), verifyCaptcha: "yes", redirectUrl: "nope" }],
    ["POST", "/forms", { name: "A", verifyCaptcha: true }],
    ["POST", "/forms", { name: "A", spamRules: { minSeconds: -1, maxLinks: 1.5 } }],
    ["POST", "/forms", { name: "A", confirmation: { emailField: "", via: "nowhere" } }],
    ["POST", `/forms/${form.id}/destinations`, { type: "webhook", config: { url: 1 } }],
    ["POST", `/forms/${form.id}/destinations`, { type: "carrier-pigeon", config: {} }],
    ["POST", `/forms/${form.id}/destinations`, {
      type: "webhook",
      config: { url: "https://a.example", method: "GET", headers: { "bad name": "x\n" } },
    }],
    ["POST", `/forms/${form.id}/destinations`, {
      type: "smtp",
      config: { ...smtp, port: 70_000, to: [], secureTransport: "maybe" },
    }],
    ["POST", `/forms/${form.id}/destinations`, { type: "smtp", config: { to: ["a@b.example"] } }],
    ["POST", `/forms/${form.id}/destinations`, { type: "telegram", config: { chatId: "x y" } }],
    ["PUT", "/notifications", { email: { to: ["owner@example.com"], via: "platform" } }],
    ["PUT", "/notifications", { email: { to: ["nope"] }, chat: ["x"], summary: "hourly" }],
    ["GET", `/forms/${form.id}/deliveries?limit=0`, undefined],
    ["GET", `/forms/${form.id}/refusals?days=99`, undefined],
  ];
  for (const [method, path, body] of refusals) {
    await t.step(`${method} ${path} ${JSON.stringify(body)?.slice(0, 60)}`, async () => {
      const issues = await issuesOf(await h.admin(method, path, body));
      assert.ok(issues.length > 0);
      for (const issue of issues) {
        const message = issue.slice(issue.indexOf(": ") + 2);
        assert.ok(isWholeSentence(message), `not a whole sentence: "${issue}"`);
      }
    });
  }
});

Deno.test("a private destination address is refused at save, naming ALLOW_PRIVATE_DESTINATIONS", async () => {
  await using h = await startHarness({ allowPrivateDestinations: false }, { deliver: false });
  const form = await h.createForm();
  const add = (body: unknown) => h.admin("POST", `/forms/${form.id}/destinations`, body);
  const hint = /ALLOW_PRIVATE_DESTINATIONS=true, meant for development/;
  const [webhook] = await issuesOf(
    await add({ type: "webhook", config: { url: "http://127.0.0.1:9000/hook" } }),
  );
  assert.match(
    webhook,
    /^config\.url: Destination address is not allowed: "127\.0\.0\.1" is a loopback/,
  );
  assert.match(webhook, hint);
  const [smtp] = await issuesOf(
    await add({
      type: "smtp",
      config: {
        host: "localhost",
        port: 25,
        username: "u",
        password: "p",
        from: "forms@example.com",
        to: ["a@example.com"],
      },
    }),
  );
  assert.match(smtp, /^config\.host: .*"localhost" is a loopback address/);
  // A name is judged when delivering (its address may change): saved.
  const named = await add({ type: "webhook", config: { url: "https://hooks.example.com/in" } });
  assert.equal(named.status, 200);
  const id = (await named.json()).destination.id;
  const patched = await h.admin("PATCH", `/forms/${form.id}/destinations/${id}`, {
    config: { url: "http://[::1]/hook" },
  });
  assert.match((await issuesOf(patched))[0], /^config\.url: .*"::1" is a loopback address/);
});
