import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import { createPaceShareExchange, type PaceShare } from "./pace_shares.ts";
import { createSealer } from "./sealing.ts";

const share = (limit: number): PaceShare => ({
  limit,
  heldUntil: 0,
  congestedAt: 0,
  rate: null,
});

Deno.test("processes on one KV see each other's pace shares, not their own nor stale ones", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    let now = 1_000_000;
    const make = (processId: string) =>
      createPaceShareExchange(db, { processId, freshMs: 3000, now: () => now });
    const [a, b, c] = [make("a"), make("b"), make("c")];
    assert.equal((await a.exchange(new Map([["d1", share(10)]]))).size, 0, "alone");
    const many = new Map(Array.from({ length: 900 }, (_, i) => [`d${i}`, share(i)]));
    const seenByA = await b.exchange(many).then(() => a.exchange(new Map([["d1", share(10)]])));
    assert.equal(seenByA.size, 900, "every destination of b, over several chunks");
    assert.deepEqual(seenByA.get("d1"), [share(1)], "b's share only, not a's own");
    const seenByC = await c.exchange(new Map());
    assert.deepEqual(seenByC.get("d1")?.map((s) => s.limit).sort(), [1, 10], "c sees both");
    await b.exchange(new Map([["d2", share(2)]]));
    assert.equal((await c.exchange(new Map())).size, 2, "b's fewer chunks replace its many");
    now += 3001;
    await a.exchange(new Map([["d1", share(10)]]));
    assert.deepEqual([...(await c.exchange(new Map())).keys()], ["d1"], "b's record is stale");
    await a.withdraw();
    assert.equal((await c.exchange(new Map())).size, 0, "a withdrew");
  } finally {
    kv.close();
  }
});
