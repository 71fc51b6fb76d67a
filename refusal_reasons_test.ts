import assert from "node:assert/strict";
import { FORM_REFUSAL_REASONS, isFormRefusalReason, REFUSAL_REASONS } from "./refusal_reasons.ts";
import { INGEST_REFUSALS } from "./errors.ts";

function read(path: string): string {
  return Deno.readTextFileSync(new URL(path, import.meta.url));
}

Deno.test("every reason counted per form is one of the refusal reasons", () => {
  for (const reason of FORM_REFUSAL_REASONS) {
    assert.ok((REFUSAL_REASONS as readonly string[]).includes(reason), reason);
    assert.ok(isFormRefusalReason(reason), reason);
  }
  assert.equal(isFormRefusalReason("body_timeout"), false);
  assert.equal(isFormRefusalReason("rate"), false);
});

Deno.test("the error catalogue's refusals of a form's visitors are counted per form by the same name", () => {
  const catalogued = new Set(INGEST_REFUSALS.map((refusal) => refusal.reason));
  for (
    const reason of ["origin", "captcha", "captcha_unavailable", "rate_limit", "size", "invalid"]
  ) {
    assert.ok(catalogued.has(reason as never), `${reason} in the catalogue`);
    assert.ok(isFormRefusalReason(reason), `${reason} counted per form`);
  }
});

Deno.test("the console explains exactly the reasons counted per form", () => {
  const source = read("console/static/deliveries.js");
  const list = source.slice(source.indexOf("const REFUSALS = ["));
  const block = list.slice(0, list.indexOf("\n];"));
  const explained = [...block.matchAll(/^ {2}\[\s*"([a-z_]+)",/gm)].map((match) => match[1]);
  assert.deepEqual(explained.toSorted(), [...FORM_REFUSAL_REASONS].toSorted());
});

Deno.test("the docs name every reason: the metrics label's list and the refusals' fields", () => {
  const operations = read("docs/operations.md");
  const metric = operations.slice(operations.indexOf("**`formrelay_submissions_refused_total`**"));
  const labels = metric.slice(0, metric.indexOf("\n**`"));
  for (const reason of REFUSAL_REASONS.filter((reason) => reason !== "nowhere")) {
    assert.ok(labels.includes(`\`${reason}\``), `docs/operations.md names "${reason}"`);
  }
  const fields = read("docs/api.md").match(/`\{ ok, days: \[\{ day, ([^}]*), spamByRule/)?.[1];
  assert.deepEqual(fields?.split(", "), [...FORM_REFUSAL_REASONS]);
});
