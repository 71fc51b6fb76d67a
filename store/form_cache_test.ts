import assert from "node:assert/strict";
import type { ChangeVersion } from "./db.ts";
import { createTtlCache } from "./form_cache.ts";

function changeVersion(): ChangeVersion {
  let value = 0;
  return {
    get value() {
      return value;
    },
    bump: () => value++,
  };
}

/** A cache whose loads wait until released, counting them. */
function pendingLoads(version: ChangeVersion) {
  const loads: PromiseWithResolvers<string>[] = [];
  const get = createTtlCache(version, (key) => {
    const load = Promise.withResolvers<string>();
    loads.push(load);
    return load.promise.then((value) => `${key}:${value}`);
  }, { ttlMs: 1000 });
  return { get, loads };
}

Deno.test("look-ups that miss while their key is loading share the load", async () => {
  const { get, loads } = pendingLoads(changeVersion());
  const answers = Promise.all(Array.from({ length: 10 }, () => get("form")));
  assert.equal(loads.length, 1);
  loads[0].resolve("v1");
  assert.deepEqual(await answers, Array(10).fill("form:v1"));
  assert.equal(await get("form"), "form:v1", "then cached");
  assert.equal(loads.length, 1);
});

Deno.test("a look-up after a write does not share a load begun before it", async () => {
  const version = changeVersion();
  const { get, loads } = pendingLoads(version);
  const before = get("form");
  version.bump();
  const after = get("form");
  assert.equal(loads.length, 2, "a load of its own");
  loads[0].resolve("old");
  loads[1].resolve("new");
  assert.equal(await before, "form:old");
  assert.equal(await after, "form:new");
  assert.equal(await get("form"), "form:new", "the newer is what is cached");
  assert.equal(loads.length, 2);
});

Deno.test("a failed load is not shared with later look-ups", async () => {
  const { get, loads } = pendingLoads(changeVersion());
  const first = get("form");
  loads[0].reject(new Error("KV down"));
  await assert.rejects(first, /KV down/);
  const second = get("form");
  assert.equal(loads.length, 2);
  loads[1].resolve("v1");
  assert.equal(await second, "form:v1");
});
