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
      "name: Required",
    ]);
    assert.deepEqual(
      await issuesOf(
        await h.admin("POST", "/forms", { allowedOrigins: ["example.com"], colour: "red" }),
      ),
      [
        "name: Required",
        "allowedOrigins.0: Enter a full web address like https://www.example.com",
        ": Unknown field: colour (check the spelling)",
      ],
    );
    assert.deepEqual(
      await issuesOf(await h.admin("PATCH", `/forms/${form.id}`, { verifyCaptcha: "yes" })),
      ["verifyCaptcha: Expected true or false"],
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
      "config.port: At least 1",
      "config.username: Required",
      "config.to.1: Enter an email address like name@example.com",
    ]);
    assert.deepEqual(
      await issuesOf(
        await add({ type: "smtp", config: { ...smtp, port: 25, to: [], username: "u" } }),
      ),
      ["config.to: Add at least one"],
    );
  });
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
