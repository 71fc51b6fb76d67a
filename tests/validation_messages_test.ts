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
