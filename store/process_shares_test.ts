import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import {
  countLiveProcesses,
  createShareExchange,
  LIVE_MS,
  type PaceShare,
  type Shares,
} from "./process_shares.ts";
import { processSharesKey } from "./keys.ts";
import { createSealer } from "./sealing.ts";

const share = (limit: number): PaceShare => ({
  limit,
  heldUntil: 0,
  congestedAt: 0,
  rate: null,
});
const paces = (entries: [string, PaceShare][]): Shares => ({ paces: new Map(entries), usage: [] });
/** A process delivering to one destination of its own, so that it takes part. */
const none: Shares = paces([["own", share(1)]]);

Deno.test("processes on one KV see each other's paces, not their own nor stale ones", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    let now = 1_000_000;
    const make = (processId: string) =>
      createShareExchange(db, { processId, freshMs: 3000, now: () => now });
    const [a, b, c] = [make("a"), make("b"), make("c")];
    assert.equal((await a.exchange(paces([["d1", share(10)]]))).paces.size, 0, "alone");
    const many = paces(Array.from({ length: 900 }, (_, i) => [`d${i}`, share(i)]));
    await b.exchange(many);
    const seenByA = (await a.exchange(paces([["d1", share(10)]]))).paces;
    assert.equal(seenByA.size, 900, "every destination of b, over several chunks");
    assert.deepEqual(seenByA.get("d1"), [share(1)], "b's share only, not a's own");
    const seenByC = (await c.exchange(none)).paces;
    assert.deepEqual(seenByC.get("d1")?.map((s) => s.limit).sort(), [1, 10], "c sees both");
    await b.exchange(paces([["d2", share(2)]]));
    assert.equal((await c.exchange(none)).paces.size, 2, "b's fewer chunks replace its many");
    now += 3001;
    await a.exchange(paces([["d1", share(10)]]));
    assert.deepEqual([...(await c.exchange(none)).paces.keys()], ["d1"], "b's record is stale");
    await a.withdraw();
    assert.equal((await c.exchange(none)).paces.size, 0, "a withdrew");
    const idle = make("idle");
    assert.equal((await idle.exchange({ paces: new Map(), usage: [] })).paces.size, 0, "idle");
  } finally {
    kv.close();
  }
});

Deno.test("a process's budget usage reaches each other process once, even past a missed exchange", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const make = (processId: string) => createShareExchange(db, { processId, freshMs: 3000 });
    const [a, b] = [make("a"), make("b")];
    const used = (amount: number): Shares => ({
      paces: new Map(),
      usage: [{ budget: "orgRequests", key: "org1", amount }],
    });
    await a.exchange(used(5));
    assert.deepEqual((await b.exchange(none)).usage, [
      { budget: "orgRequests", key: "org1", amount: 5 },
    ]);
    assert.deepEqual((await b.exchange(none)).usage, [], "charged once");
    await a.exchange(used(2));
    await a.exchange(used(3)); // b misses the exchange in between
    const seen = (await b.exchange(none)).usage.map((row) => row.amount).sort();
    assert.deepEqual(seen, [2, 3]);
  } finally {
    kv.close();
  }
});

Deno.test("an idle process is counted live: an empty record at once, then within every LIVE_MS", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    let now = 1_000_000;
    const idle = createShareExchange(db, { processId: "idle", freshMs: 3000, now: () => now });
    const nothing: Shares = { paces: new Map(), usage: [] };
    assert.equal(await countLiveProcesses(db, now), 0);
    await idle.exchange(nothing);
    assert.equal(await countLiveProcesses(db, now), 1, "written at its first exchange");
    // Exchanged every second for a minute, as the engine does: never missing from a count.
    for (let second = 1; second <= 60; second++) {
      now += 1000;
      await idle.exchange(nothing);
      assert.equal(await countLiveProcesses(db, now), 1, `live ${second} s on`);
    }
    // Writes about one record in LIVE_MS / 2, not one an exchange.
    const versions = new Set<string>();
    for (let second = 0; second < 20; second++) {
      now += 1000;
      await idle.exchange(nothing);
      versions.add((await kv.get(processSharesKey("idle", 0))).versionstamp ?? "none");
    }
    assert.ok(versions.size <= 20_000 / (LIVE_MS / 2) + 1, `${versions.size} writes in 20 s`);
    await idle.withdraw();
    assert.equal(await countLiveProcesses(db, now), 0, "withdrawn on shutdown");
  } finally {
    kv.close();
  }
});
