import assert from "node:assert/strict";
import { KEY_FAMILIES } from "./keys.ts";

const source = Deno.readTextFileSync(new URL("./keys.ts", import.meta.url));
// Every builder declares its tuple: `): ["family", …]`.
const families = new Set([...source.matchAll(/\): \[\s*"([a-z_]+)"/g)].map((match) => match[1]));

Deno.test("keys.ts's layout header names every key family its builders return", () => {
  const header = source.slice(0, source.indexOf("@module"));
  assert.ok(families.size >= 30, `found ${families.size} families`);
  const missing = [...families].filter((family) =>
    !header.includes(`\`${family}/`) && !header.includes(`\`${family}\``)
  );
  assert.deepEqual(missing, []);
});

Deno.test("every key family declares what it names (deleting an organization walks the list)", () => {
  assert.deepEqual(
    [...families].filter((family) => !Object.hasOwn(KEY_FAMILIES, family)),
    [],
    "families without a declaration in KEY_FAMILIES",
  );
  assert.deepEqual(
    Object.keys(KEY_FAMILIES).filter((family) => !families.has(family)),
    [],
    "declarations without a key builder",
  );
  // Each kind of id named is the organization's, or learnt from a family that defines it.
  const defined = new Set(["org", ...Object.values(KEY_FAMILIES).flatMap((f) => f?.defines ?? [])]);
  for (const [family, names] of Object.entries(KEY_FAMILIES)) {
    if (names === null) continue;
    const kinds = [...Object.values(names.key), ...Object.values(names.value ?? {})];
    assert.ok(kinds.length > 0, `${family} names nothing: declare it null`);
    for (const kind of kinds) assert.ok(defined.has(kind!), `${family}: no family defines ${kind}`);
  }
});
