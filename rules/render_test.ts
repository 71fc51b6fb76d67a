import assert from "node:assert/strict";
import { renderPlaceholders } from "./render.ts";

Deno.test("placeholders: known ones replaced, fields only those given and cut, unknown ones left", () => {
  const values = {
    formName: "Contact",
    submissionId: "s-1",
    submittedAt: "2026-11-24T12:00:00.000Z",
    origin: null,
    fields: { name: "Ada Lovelace", tags: ["a", "b"] },
    maxFieldChars: 5,
  };
  assert.equal(
    renderPlaceholders(
      "{{formName}} {{ submissionId }} {{submittedAt}} [{{origin}}] {{fields.name}} {{fields.tags}} [{{fields.secret}}] {{nope}}",
      values,
    ),
    "Contact s-1 2026-11-24T12:00:00.000Z [] Ada … a, b [] {{nope}}",
  );
});
