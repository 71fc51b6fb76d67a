import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import { createSealer } from "./sealing.ts";
import { claimTestSend } from "./test_sends.ts";

Deno.test("one test send under way per destination across processes; a claim left behind lapses", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    // Two processes: two Db handles on one KV.
    const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
    const [a, b] = [createDb(kv, sealer), createDb(kv, sealer)];
    const now = Date.now();
    const release = await claimTestSend(a, "d", { ttlMs: 120_000, now });
    assert.ok(release !== null, "a claims");
    assert.equal(await claimTestSend(b, "d", { ttlMs: 120_000, now }), null, "b is refused");
    assert.ok(await claimTestSend(b, "other", { ttlMs: 120_000, now }), "another destination");
    await release();
    const again = await claimTestSend(b, "d", { ttlMs: 120_000, now });
    assert.ok(again !== null, "free once released");
    // b is killed with its claim held: after its time, the claim is free.
    const later = await claimTestSend(a, "d", { ttlMs: 120_000, now: now + 120_001 });
    assert.ok(later !== null, "a lapsed claim is taken over");
    await again(); // b's late release leaves a's claim alone
    assert.equal(await claimTestSend(b, "d", { ttlMs: 120_000, now: now + 120_002 }), null);
  } finally {
    kv.close();
  }
});
