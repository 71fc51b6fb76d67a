import assert from "node:assert/strict";
import { testConfig } from "../tests/helpers/config.ts";
import { createDb } from "../store/db.ts";
import { nextUtcDay } from "../store/relay_usage.ts";
import { createSealer } from "../store/sealing.ts";
import { createOutboundBudget, outboundRequestOf } from "./outbound_budget.ts";
import { createTokenBuckets } from "./token_buckets.ts";

Deno.test("a token bucket refuses past its capacity with the wait until it refills, and lends once when full", () => {
  const buckets = createTokenBuckets({ capacity: 3, windowMs: 3000 });
  for (let i = 0; i < 3; i++) {
    assert.equal(buckets.waitMs("a", 1, 0), 0);
    buckets.take("a", 1, 0);
  }
  assert.equal(buckets.waitMs("a", 1, 0), 1000);
  assert.equal(buckets.waitMs("a", 1, 1000), 0, "one token back after a third of the window");
  assert.equal(buckets.waitMs("b", 1, 0), 0, "another key has its own");
  // Larger than the capacity: goes through when full, then the debt is paid off.
  assert.equal(buckets.waitMs("c", 10, 0), 0);
  buckets.take("c", 10, 0);
  assert.equal(buckets.waitMs("c", 1, 0), 8000);
  assert.equal(createTokenBuckets({ capacity: 0, windowMs: 1 }).waitMs("a", 1e9, 0), 0, "0: none");
});

Deno.test("requests refused together get turns one after another at the bucket's rate", () => {
  const buckets = createTokenBuckets({ capacity: 2, windowMs: 2000 });
  buckets.take("a", 2, 0);
  assert.deepEqual([0, 0, 0].map(() => buckets.turnMs("a", 1, 0)), [1000, 2000, 3000]);
  assert.equal(buckets.turnMs("b", 1, 0), 0, "another key's turns are its own");
  assert.equal(buckets.turnMs("a", 1, 5000), 0, "past turns are forgotten: room now");
});

async function budgetOn(overrides: Parameters<typeof testConfig>[0]) {
  const kv = await Deno.openKv(":memory:");
  const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
  return { kv, budget: createOutboundBudget(db, testConfig(overrides)) };
}

Deno.test("the outbound budget counts requests and bytes per organization and per host, and says until when", async () => {
  const base = testConfig();
  const { kv, budget } = await budgetOn({
    outbound: { windowMs: 60_000, orgRequests: 0, orgBytes: 1000, hostRequests: 2, hostBytes: 0 },
  });
  try {
    const send = (host: string, bytes: number, orgId = "a") =>
      budget.take({ orgId, host, bytes, relayRecipients: 0 }, 0);
    assert.deepEqual(await send("one.example", 100), { ok: true });
    assert.deepEqual(await send("ONE.example", 100), { ok: true });
    assert.deepEqual(await send("one.example", 100), {
      ok: false,
      retryAt: 30_000,
      reason: `the organization's request limit for "one.example" is reached`,
    });
    assert.deepEqual(await send("two.example", 800), { ok: true });
    const over = await send("three.example", 100);
    assert.equal(over.ok, false);
    assert.ok(!over.ok && over.reason === "the organization's outbound byte limit is reached");
    assert.deepEqual(await send("three.example", 100, "b"), { ok: true }, "another org");
    assert.ok(base.outbound.hostBytes > 0, "defaults are limits");
  } finally {
    kv.close();
  }
});

Deno.test("platform relay mail is capped per organization per minute and per UTC day (kept in KV)", async () => {
  const { kv, budget } = await budgetOn({
    relayLimits: { maxRecipients: 5, orgPerMinute: 6, orgPerDay: 8 },
  });
  try {
    const relay = (recipients: number, now: number) =>
      budget.take({ orgId: "a", host: "relay:587", bytes: 10, relayRecipients: recipients }, now);
    const t = Date.UTC(2026, 10, 24, 12);
    assert.deepEqual(await relay(5, t), { ok: true });
    const minute = await relay(5, t);
    assert.ok(!minute.ok && minute.reason === "the platform relay's limit per minute is reached");
    assert.deepEqual(await relay(3, t + 60_000), { ok: true });
    const day = await relay(1, t + 120_000);
    assert.deepEqual(day, {
      ok: false,
      retryAt: nextUtcDay(t),
      reason: "the platform relay's daily limit is reached",
    });
    assert.deepEqual(await relay(5, nextUtcDay(t)), { ok: true }, "a new day");
  } finally {
    kv.close();
  }
});

Deno.test("outboundRequestOf names the host of a URL, a relay, or the platform relay with its recipients", () => {
  const options = { orgId: "a", bytes: 1, platformHost: "mail.example:587" };
  assert.equal(
    outboundRequestOf({
      type: "webhook",
      config: { url: "https://u:p@Hooks.example:8443/x?token=1" },
    }, options).host,
    "hooks.example:8443",
  );
  assert.equal(
    outboundRequestOf(
      { type: "smtp", config: { host: "smtp.example", port: 25, to: ["a@b.c"] } },
      options,
    ).host,
    "smtp.example:25",
  );
  assert.deepEqual(
    outboundRequestOf({ type: "smtp", config: { to: ["a@b.c", "d@e.f"] } }, options),
    { orgId: "a", bytes: 1, host: "mail.example:587", relayRecipients: 2 },
  );
});

Deno.test("four processes sharing their usage each second spend about one budget together", async () => {
  const { createShareExchange } = await import("../store/process_shares.ts");
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const config = testConfig({
      outbound: { windowMs: 60_000, orgRequests: 60, orgBytes: 0, hostRequests: 0, hostBytes: 0 },
    });
    const processes = Array.from({ length: 4 }, (_, i) => ({
      budget: createOutboundBudget(db, config),
      shares: createShareExchange(db, { processId: `p${i}`, freshMs: 3000 }),
    }));
    // Each process sends as fast as its budget lets it, 10 times a second, for two minutes,
    // exchanging usage every second as the engine does.
    let sent = 0;
    for (let ms = 0; ms < 120_000; ms += 100) {
      for (const { budget } of processes) {
        const answer = await budget.take(
          { orgId: "a", host: "h", bytes: 1, relayRecipients: 0 },
          ms,
        );
        if (answer.ok) sent++;
      }
      if (ms % 1000 !== 0) continue;
      for (const { budget, shares } of processes) {
        const others = await shares.exchange({ paces: new Map(), usage: budget.usage() });
        budget.charge(others.usage, ms);
      }
    }
    // One process alone: 60 at once, then one a second: 60 + 120 = 180.
    assert.ok(sent >= 180, `${sent} sent: at least what one process would`);
    assert.ok(sent <= 200, `${sent} sent: about what one process would`);
  } finally {
    kv.close();
  }
});

/**
 * Processes on one KV, each joining at `startsAt` (its first exchange, before it spends,
 * as the engine does) and then taking from the per-host budget as fast as it lets it,
 * every 100 ms, exchanging every second, for `seconds`: how many requests went out.
 */
async function spentTogether(startsAt: number[], seconds: number) {
  const { createShareExchange } = await import("../store/process_shares.ts");
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const config = testConfig({
      outbound: { windowMs: 60_000, orgRequests: 0, orgBytes: 0, hostRequests: 300, hostBytes: 0 },
    });
    let ms = 0;
    const processes = startsAt.map((startAt, i) => ({
      startAt,
      budget: createOutboundBudget(db, config),
      shares: createShareExchange(db, { processId: `p${i}`, freshMs: 3000, now: () => ms }),
    }));
    const exchange = async ({ budget, shares }: (typeof processes)[number]) => {
      const others = await shares.exchange({
        paces: new Map(),
        usage: budget.usage(),
        debts: budget.debts(ms),
      });
      budget.charge(others.usage, ms);
      budget.join(others, ms);
    };
    let sent = 0;
    for (ms = 0; ms < seconds * 1000; ms += 100) {
      for (const process of processes) {
        if (ms < process.startAt) continue;
        if (ms === process.startAt || ms % 1000 === 0) await exchange(process);
        for (let i = 0; i < 100; i++) {
          const answer = await process.budget.take(
            { orgId: "a", host: "h.example", bytes: 1, relayRecipients: 0 },
            ms,
          );
          if (!answer.ok) break;
          sent++;
        }
      }
    }
    return sent;
  } finally {
    kv.close();
  }
}

Deno.test("four processes starting together, or one after another, spend at most 1.5 × what one does", async () => {
  const one = await spentTogether([0], 45);
  // 300 at once, then 5 a second: 300 + 44.9 × 5.
  assert.ok(one >= 520 && one <= 530, `${one} from one process`);
  const together = await spentTogether([0, 0, 0, 0], 45);
  assert.ok(together <= 1.5 * one, `${together} from four starting together (one: ${one})`);
  const staggered = await spentTogether([0, 10_000, 20_000, 30_000], 45);
  assert.ok(staggered <= 1.5 * one, `${staggered} from four starting in turn (one: ${one})`);
});
