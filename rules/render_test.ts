import assert from "node:assert/strict";
import { MAX_RENDERED_CHARS, renderPlaceholders } from "./render.ts";

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

Deno.test("placeholders: a text naming a long field hundreds of times stays within the limit", () => {
  const text = "{{fields.x}}\n".repeat(300);
  const rendered = renderPlaceholders(text, {
    formName: "Contact",
    submissionId: "s-1",
    submittedAt: "2026-11-24T12:00:00.000Z",
    origin: null,
    fields: { x: "y".repeat(128 * 1024) },
    maxFieldChars: 200,
  });
  assert.equal(rendered.length, MAX_RENDERED_CHARS);
  assert.ok(rendered.startsWith(`${"y".repeat(199)}…\n${"y".repeat(199)}…\n`));
  assert.ok(rendered.endsWith("…"));
});
