import assert from "node:assert/strict";

Deno.test("keys.ts's layout header names every key family its builders return", () => {
  const source = Deno.readTextFileSync(new URL("./keys.ts", import.meta.url));
  const header = source.slice(0, source.indexOf("@module"));
  // Every builder declares its tuple: `): ["family", …]`.
  const families = new Set([...source.matchAll(/\): \[\s*"([a-z_]+)"/g)].map((match) => match[1]));
  assert.ok(families.size >= 30, `found ${families.size} families`);
  const missing = [...families].filter((family) =>
    !header.includes(`\`${family}/`) && !header.includes(`\`${family}\``)
  );
  assert.deepEqual(missing, []);
});
