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
    const nothing = { paces: new Map(), usage: [] };
    assert.ok((await idle.exchange(nothing)).paces.size > 0, "its first exchange joins the others");
    assert.equal((await idle.exchange(nothing)).paces.size, 0, "idle since: nothing read");
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

/**
 * What a process of one tenant with `destinations` destinations, on hosts of
 * `hostLength` characters (one host each, or `hosts` of them), shares after delivering
 * to each: its usage and its buckets' lacks through the outbound budget, its paces (a
 * fresh destination's each, or each cut once and growing back).
 */
async function tenantShares(
  destinations: number,
  hostLength: number,
  options: { hosts?: number; paces: "fresh" | "cut" },
): Promise<Shares> {
  const hosts = options.hosts ?? destinations;
  const { createOutboundBudget } = await import("../delivery/outbound_budget.ts");
  const { testConfig } = await import("../tests/helpers/config.ts");
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const budget = createOutboundBudget(db, testConfig());
    const orgId = crypto.randomUUID();
    for (let i = 0; i < destinations; i++) {
      const name = `h${i % hosts}-`;
      const host = name + "x".repeat(hostLength - name.length - 8) + ".example";
      await budget.take({ orgId, host, bytes: 2000, relayRecipients: 0 }, 1_000_000);
    }
    const paces = new Map<string, PaceShare>(
      Array.from({ length: destinations }, () => [
        crypto.randomUUID(),
        options.paces === "fresh" ? share(1) : {
          limit: 3.517,
          heldUntil: 0,
          congestedAt: 999_000,
          rate: null,
        },
      ]),
    );
    return { paces, usage: budget.usage(), debts: budget.debts(1_000_000) };
  } finally {
    kv.close();
  }
}

/** The JSON size of every chunk of `processId`'s record. */
async function recordBytes(kv: Deno.Kv, processId: string): Promise<number[]> {
  const sizes: number[] = [];
  for await (const entry of kv.list({ prefix: ["process_shares", processId] })) {
    sizes.push(JSON.stringify(entry.value).length);
  }
  return sizes;
}

Deno.test("a record is bounded by size whatever one tenant configures, on a KV file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-shares-" });
  const kv = await Deno.openKv(`${dir}/kv.sqlite`);
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const cases: [string, Shares, number][] = [
      // Each case: the bound of the whole record's JSON.
      [
        "40 destinations on 200-character hosts",
        await tenantShares(40, 200, { paces: "cut" }),
        64_000,
      ],
      // Fresh paces: each destination's id alone.
      [
        "2 000 destinations on 20-character hosts",
        await tenantShares(2000, 20, { paces: "fresh" }),
        2 * 56_000,
      ],
      [
        "1 000 destinations on 1 000 hosts",
        await tenantShares(1000, 30, { paces: "fresh" }),
        64_000,
      ],
      // Every pace cut: a row each, in chunks, at most MAX_CHUNKS of them.
      [
        "2 000 destinations on 20-character hosts, every pace cut",
        await tenantShares(2000, 20, { paces: "cut" }),
        8 * 56_000,
      ],
    ];
    for (const [name, shares, bound] of cases) {
      const processId = crypto.randomUUID();
      const exchange = createShareExchange(db, { processId, freshMs: 3000, freshLimit: 1 });
      // Twenty exchanges, as the engine makes in twenty seconds, usage kept over three.
      for (let i = 0; i < 20; i++) {
        const others = await exchange.exchange(shares);
        assert.equal(others.writeError, undefined, `${name}: exchange ${i} wrote its record`);
      }
      const sizes = await recordBytes(kv, processId);
      const total = sizes.reduce((a, b) => a + b, 0);
      assert.ok(sizes.every((size) => size < 60_000), `${name}: chunks of ${sizes}`);
      assert.ok(total < bound, `${name}: ${total} bytes`);
      // Read back by another process: every destination, as its pace or a fresh one.
      const reader = createShareExchange(db, { processId: "reader", freshMs: 3000, freshLimit: 1 });
      assert.equal((await reader.exchange(none)).paces.size, shares.paces.size, name);
      await exchange.withdraw();
      await reader.withdraw();
    }
  } finally {
    kv.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a process whose record KV refuses still reads the others' and is still counted", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    await createShareExchange(db, { processId: "other", freshMs: 3000 })
      .exchange(paces([["d1", share(4)]]));
    // KV refuses every commit that writes rows (as it refused records too large).
    const refusing = new Proxy(kv, {
      get(target, name) {
        if (name !== "atomic") return Reflect.get(target, name)?.bind?.(target);
        return () => {
          const op = target.atomic();
          let rows = 0;
          return new Proxy(op, {
            get(opTarget, opName) {
              if (opName === "set") {
                return (key: Deno.KvKey, value: { rows: unknown[] }, options?: object) => {
                  rows += value.rows.length;
                  opTarget.set(key, value, options);
                  return opTarget;
                };
              }
              if (opName === "commit") {
                return () =>
                  rows > 0
                    ? Promise.reject(new TypeError("Value too large (max 65536 bytes)"))
                    : opTarget.commit();
              }
              return Reflect.get(opTarget, opName)?.bind?.(opTarget);
            },
          });
        };
      },
    });
    const exchange = createShareExchange({ ...db, kv: refusing }, {
      processId: "refused",
      freshMs: 3000,
    });
    const others = await exchange.exchange(paces([["d2", share(2)]]));
    assert.match(String(others.writeError), /Value too large/);
    assert.deepEqual(others.paces.get("d1"), [share(4)], "the others' read all the same");
    assert.equal(others.processes, 2);
    assert.equal(await countLiveProcesses(db), 2, "its empty record counts it");
  } finally {
    kv.close();
  }
});
