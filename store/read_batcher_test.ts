import assert from "node:assert/strict";
import { createReadBatcher } from "./read_batcher.ts";

/** A KV whose getMany calls are recorded (their keys); the next `failures` of them fail. */
async function countingKv() {
  const kv = await Deno.openKv(":memory:");
  const reads: Deno.KvKey[][] = [];
  const state = { failures: 0 };
  const counted = new Proxy(kv, {
    get(target, property) {
      if (property === "getMany") {
        return (keys: Deno.KvKey[]) => {
          reads.push(keys);
          if (state.failures === 0) return target.getMany(keys);
          state.failures--;
          return Promise.reject(new Error("KV read failed"));
        };
      }
      const value = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { kv, counted, reads, state };
}

Deno.test("reads asked for while one is under way share the next getMany, up to 10 keys", async () => {
  const { kv, counted, reads } = await countingKv();
  using _ = kv;
  for (let i = 0; i < 12; i++) await kv.set(["k", i], i);
  const reader = createReadBatcher(counted);
  const answers = await Promise.all(
    Array.from(
      { length: 6 },
      (_, i) => reader.getMany<[number, number]>([["k", 2 * i], ["k", 2 * i + 1]]),
    ),
  );
  // Each caller gets its own keys' entries, in order.
  assert.deepEqual(answers.map((entries) => entries.map((entry) => entry.value)), [
    [0, 1],
    [2, 3],
    [4, 5],
    [6, 7],
    [8, 9],
    [10, 11],
  ]);
  // The first read went alone; the other five (10 keys) went together once it returned.
  assert.deepEqual(reads.map((keys) => keys.length), [2, 10]);
});

Deno.test("a failed getMany rejects its readers only; the reads after it go on", async () => {
  const { kv, counted, reads, state } = await countingKv();
  using _ = kv;
  await kv.set(["k"], "value");
  const reader = createReadBatcher(counted);
  state.failures = 1;
  const failing = reader.getMany([["k"]]);
  const next = reader.getMany<[string]>([["k"]]);
  await assert.rejects(failing, /KV read failed/);
  assert.equal((await next)[0].value, "value");
  assert.equal(reads.length, 2);
  await assert.rejects(reader.getMany([]), RangeError);
});
