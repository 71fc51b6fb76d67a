import assert from "node:assert/strict";
import { type BatchPart, createCommitBatcher } from "./batcher.ts";

/** A KV whose commits are counted, with the number of mutations each carried. */
async function countingKv() {
  const kv = await Deno.openKv(":memory:");
  const commits: number[] = [];
  const counted = new Proxy(kv, {
    get(target, property) {
      if (property === "atomic") {
        return () => {
          const op = target.atomic();
          let mutations = 0;
          const set = op.set.bind(op);
          op.set = (...args: Parameters<typeof op.set>) => {
            mutations++;
            return set(...args);
          };
          const commit = op.commit.bind(op);
          op.commit = () => {
            commits.push(mutations);
            return commit();
          };
          return op;
        };
      }
      const value = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { kv, counted, commits };
}

const setPart = (key: Deno.KvKey, value: unknown): BatchPart => ({
  apply: (op) => op.set(key, value),
  mutations: 1,
});

Deno.test("parts that arrive while a commit runs share the next one", async () => {
  const { kv, counted, commits } = await countingKv();
  using _ = kv;
  const batcher = createCommitBatcher(counted, { queues: false });
  const answers = await Promise.all(
    Array.from({ length: 30 }, (_, i) => batcher.commit(setPart(["k", i], i))),
  );
  assert.ok(answers.every((versionstamp) => typeof versionstamp === "string"));
  // The first part goes alone (nothing was running); the 29 others wait for it together.
  assert.deepEqual(commits, [1, 29]);
  assert.equal((await kv.get(["k", 29])).value, 29);
});

Deno.test("a part whose check fails in a merged commit gets null, and the others go in", async () => {
  const { kv, counted } = await countingKv();
  using _ = kv;
  await kv.set(["taken"], 1);
  const batcher = createCommitBatcher(counted, { queues: false });
  const first = batcher.commit(setPart(["first"], 1));
  const losing: BatchPart = {
    apply: (op) => op.check({ key: ["taken"], versionstamp: null }).set(["taken"], 2),
    mutations: 1,
    checks: 1,
  };
  const [, lost, kept] = await Promise.all([
    first,
    batcher.commit(losing),
    batcher.commit(setPart(["kept"], 3)),
  ]);
  assert.equal(lost, null);
  assert.equal(typeof kept, "string");
  assert.equal((await kv.get(["taken"])).value, 1);
  assert.equal((await kv.get(["kept"])).value, 3);
});

Deno.test("a part that throws while it is added is refused alone", async () => {
  const { kv, counted } = await countingKv();
  using _ = kv;
  const batcher = createCommitBatcher(counted, { queues: false });
  const first = batcher.commit(setPart(["first"], 1));
  // Half added when it throws: its first mutation must not be committed with the others.
  const throwing: BatchPart = {
    apply(op) {
      op.set(["half"], 1);
      throw new Error("cannot add this part");
    },
    mutations: 2,
  };
  const results = await Promise.allSettled([
    first,
    batcher.commit(throwing),
    batcher.commit(setPart(["kept"], 3)),
  ]);
  assert.deepEqual(results.map((r) => r.status), ["fulfilled", "rejected", "fulfilled"]);
  assert.equal((await kv.get(["half"])).value, null);
  assert.equal((await kv.get(["kept"])).value, 3);
});

Deno.test("parts beyond one commit's limits go in the following commits, in order", async () => {
  const { kv, counted, commits } = await countingKv();
  using _ = kv;
  const batcher = createCommitBatcher(counted, { queues: false });
  const big = (i: number): BatchPart => ({
    apply(op) {
      for (let j = 0; j < 100; j++) op.set(["big", i, j], j);
    },
    mutations: 100,
  });
  await Promise.all(Array.from({ length: 10 }, (_, i) => batcher.commit(big(i))));
  // 450 mutations at most per commit: the first alone, then four parts per commit.
  assert.deepEqual(commits, [100, 400, 400, 100]);
  const stored = await Array.fromAsync(kv.list({ prefix: ["big"] }));
  assert.equal(stored.length, 1000);
});

Deno.test("checked commits refused because another connection to the file wrote first are tried again", async () => {
  // Two connections to one file behave as two processes sharing it: a checked commit
  // whose read came before the other's write is refused with "database is locked".
  const dir = await Deno.makeTempDir();
  const kvs = [await Deno.openKv(`${dir}/kv`), await Deno.openKv(`${dir}/kv`)];
  try {
    const counters = Array.from({ length: 20 }, (_, i) => ["counter", i]);
    await Promise.all(counters.map((key) => kvs[0].set(key, 0)));
    // Each connection's batcher bumps every counter 10 times, each bump a check-and-set.
    const bumps = kvs.flatMap((kv) => {
      const batcher = createCommitBatcher(kv, { queues: false });
      return counters.map(async (key) => {
        for (let n = 0; n < 10;) {
          const entry = await kv.get<number>(key);
          const versionstamp = await batcher.commit({
            apply: (op) => op.check(entry).set(key, entry.value! + 1),
            mutations: 1,
            checks: 1,
          });
          if (versionstamp !== null) n++;
        }
      });
    });
    const results = await Promise.allSettled(bumps);
    assert.deepEqual(results.filter((r) => r.status === "rejected"), []);
    const values = await Promise.all(counters.map(async (key) => (await kvs[0].get(key)).value));
    assert.deepEqual(values, counters.map(() => 20));
  } finally {
    for (const kv of kvs) kv.close();
    await Deno.remove(dir, { recursive: true });
  }
});
