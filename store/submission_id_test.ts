import assert from "node:assert/strict";
import { acceptedAtOf, submissionIdAt } from "./submission_id.ts";

Deno.test("a submission id is a version-7 UUID that gives back its acceptance time", () => {
  const at = Date.UTC(2026, 10, 24, 19, 55, 1, 234);
  const ids = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const id = submissionIdAt(at);
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(acceptedAtOf(id), at);
    ids.add(id);
  }
  assert.equal(ids.size, 1000, "random bits keep ids of one millisecond apart");
  assert.equal(acceptedAtOf(submissionIdAt(0)), 0);
});

Deno.test("an id of another version, or no id at all, holds no acceptance time", () => {
  assert.equal(acceptedAtOf(crypto.randomUUID()), null);
  assert.equal(acceptedAtOf("not an id"), null);
});
