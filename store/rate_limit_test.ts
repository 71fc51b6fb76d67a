import assert from "node:assert/strict";
import { createDb, type Db } from "./db.ts";
import { createShareExchange } from "./process_shares.ts";
import { createRateLimiter, type RateLimiter } from "./rate_limit.ts";
import { createSealer } from "./sealing.ts";
import { waitFor } from "../tests/helpers/wait.ts";

/** A clock halfway through a window, so that no test sees a window end. */
const midWindow = () => Date.UTC(2026, 0, 1, 12, 5);

async function withDb(test: (db: Db) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  try {
    await test(createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32)))));
  } finally {
    kv.close();
  }
}

/** Writes a process record, as a service does before it admits anything. */
async function register(db: Db, processId: string) {
  await createShareExchange(db, { processId, freshMs: 3000 })
    .exchange({ paces: new Map(), usage: [] });
}

/** Posts as `client` to `limiters` in turn until each has refused it; how many were let through. */
async function admitted(limiters: RateLimiter[], client: string, attempts: number, db: Db) {
  let passed = 0;
  for (let i = 0; i < attempts; i++) {
    const slot = await limiters[i % limiters.length].reserve("f", client);
    if ("retryAfter" in slot) continue;
    slot.count();
    passed++;
    // A submission takes at least its acceptance commit: the count's write goes with it.
    await db.batcher.commit({ apply() {}, mutations: 0 });
  }
  return passed;
}

Deno.test("rate limit: a flood of other addresses does not reset a client's count", async () => {
  await withDb(async (db) => {
    const limiter = createRateLimiter(db, { max: 60, windowMs: 600_000, now: midWindow });
    assert.equal(await admitted([limiter], "203.0.113.7", 20, db), 20);
    // 60 000 one-off addresses (an IPv6 /48 behind a trusted header), more than the
    // limiter keeps in memory.
    for (let i = 0; i < 60_000; i++) {
      const slot = await limiter.reserve("f", `2001:db8:1::${i.toString(16)}`);
      if (!("retryAfter" in slot)) slot.count();
    }
    const more = await admitted([limiter], "203.0.113.7", 100, db);
    assert.ok(more <= 41, `${more} more let through after the flood: at most 40 + 1`);
    assert.ok(more >= 40, `${more}: the client still gets what it had left`);
  });
});

Deno.test("rate limit: N processes on one KV let a client through at most the limit + N − 1", async () => {
  await withDb(async (db) => {
    for (const processes of [1, 2, 4]) {
      const limiters = Array.from(
        { length: processes },
        () => createRateLimiter(db, { max: 10, windowMs: 600_000, now: midWindow }),
      );
      const passed = await admitted(limiters, `198.51.100.${processes}`, 100, db);
      assert.ok(passed >= 10, `${processes} processes: ${passed}, at least the limit`);
      assert.ok(passed <= 10 + processes - 1, `${processes} processes: ${passed} let through`);
    }
  });
});

Deno.test("rate limit: with more processes than half the limit, first submissions are read too: within 2 × the limit", async () => {
  await withDb(async (db) => {
    // Twelve live processes, as their process records show.
    for (let i = 0; i < 12; i++) {
      await createShareExchange(db, { processId: `p${i}`, freshMs: 60_000 }).exchange({
        paces: new Map([["d", { limit: 1, heldUntil: 0, congestedAt: 0, rate: null }]]),
        usage: [],
      });
    }
    const limiters = Array.from(
      { length: 12 },
      () => createRateLimiter(db, { max: 10, windowMs: 600_000, now: midWindow }),
    );
    const passed = await admitted(limiters, "198.51.100.99", 100, db);
    assert.ok(passed <= 11, `${passed} let through by 12 processes (a free first each: 21)`);
  });
});

Deno.test("rate limit: processes starting one after another, each counted before it admits anything, stay within 2 × the limit", async () => {
  await withDb(async (db) => {
    // Twelve processes start in turn: each writes its record (as the service does before
    // it admits anything), then counts the others at its first request. The first five
    // see at most half the limit (10) and let a client's first submission through unseen;
    // the others read and write firsts too.
    const limiters: RateLimiter[] = [];
    for (let i = 0; i < 12; i++) {
      await register(db, `p${i}`);
      const limiter = createRateLimiter(db, { max: 10, windowMs: 600_000, now: midWindow });
      const first = await limiter.reserve("f", `192.0.2.${i}`);
      if (!("retryAfter" in first)) first.release();
      limiters.push(limiter);
    }
    const passed = await admitted(limiters, "198.51.100.98", 100, db);
    assert.ok(passed >= 10, `${passed}: at least the limit`);
    assert.ok(passed <= 10 + 5, `${passed} let through (unregistered, each a free first: 21)`);
  });
});

Deno.test("rate limit: processes started together, each registered before any marks, are not alone: the limit + N − 1", async () => {
  await withDb(async (db) => {
    // Four services start at once: each writes its process record before it admits
    // anything, and none has marked when the first request arrives. The clock stands
    // still, so the first to count never looks at the marks again.
    const ids = ["p0", "p1", "p2", "p3"];
    for (const id of ids) await register(db, id);
    const limiters = ids.map((processId) =>
      createRateLimiter(db, { max: 10, windowMs: 600_000, now: midWindow, processId })
    );
    const passed = await admitted(limiters, "198.51.100.97", 100, db);
    assert.ok(passed >= 10, `${passed}: at least the limit`);
    assert.ok(passed <= 10 + 3, `${passed} let through by four processes`);
  });
});

/** A Db whose KV counts the listings of rate-limit counts (the reads of a repeat client). */
async function withCountedReads(test: (db: Db, reads: () => number) => Promise<void>) {
  await withDb(async (db) => {
    let reads = 0;
    const kv = new Proxy(db.kv, {
      get(target, name) {
        if (name === "list") {
          return (selector: { prefix: Deno.KvKey }, options?: Deno.KvListOptions) => {
            if (selector.prefix[0] === "rate") reads++;
            return target.list(selector, options);
          };
        }
        const value = Reflect.get(target, name);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    await test({ ...db, kv }, () => reads);
  });
}

Deno.test("rate limit: a service's limiter alone on its KV reads no count back, and a process starting later reads them", async () => {
  await withCountedReads(async (db, reads) => {
    const alone = createRateLimiter(db, {
      max: 10,
      windowMs: 600_000,
      now: midWindow,
      processId: "p0",
    });
    assert.equal(await admitted([alone], "198.51.100.1", 30, db), 10);
    assert.equal(reads(), 0, "no other process has counted: no read");
    // A process starting now marks itself and reads what the first one wrote.
    const later = createRateLimiter(db, {
      max: 10,
      windowMs: 600_000,
      now: midWindow,
      processId: "p1",
    });
    const passed = await admitted([later], "198.51.100.1", 30, db);
    assert.ok(reads() > 0, "the newcomer reads");
    assert.ok(passed <= 1, `${passed} let through by the newcomer: its free first at most`);
  });
});

Deno.test("rate limit: a process restarted within the window finds its predecessor's mark and reads", async () => {
  await withCountedReads(async (db, reads) => {
    const options = { max: 10, windowMs: 600_000, now: midWindow };
    const before = createRateLimiter(db, { ...options, processId: "before" });
    assert.equal(await admitted([before], "198.51.100.2", 6, db), 6);
    const after = createRateLimiter(db, { ...options, processId: "after" });
    const passed = await admitted([after], "198.51.100.2", 30, db);
    assert.ok(reads() > 0);
    assert.ok(passed <= 5, `${passed} after the restart: 4 left, a restart one more`);
  });
});

Deno.test("rate limit: a process that counted alone notices a newcomer at its next look at the marks: within 2 × the limit", async () => {
  await withCountedReads(async (db) => {
    let t = midWindow();
    const options = { max: 10, windowMs: 600_000, now: () => t };
    const first = createRateLimiter(db, { ...options, processId: "first" });
    assert.equal(await admitted([first], "192.0.2.1", 1, db), 1);
    // The newcomer takes what the first left; the first, not having looked, still admits.
    const newcomer = createRateLimiter(db, { ...options, processId: "newcomer" });
    const meanwhile = await admitted([newcomer, first], "198.51.100.3", 100, db);
    assert.ok(meanwhile <= 20, `${meanwhile} let through before the first looked`);
    // Past its next look, the first reads the newcomer's counts too.
    t += 10_000;
    await admitted([first], "192.0.2.2", 1, db);
    const client = "198.51.100.4";
    assert.equal(await admitted([newcomer], client, 5, db), 5);
    const then = await admitted([first, newcomer], client, 100, db);
    assert.ok(then <= 5 + 1, `${then} more once both read each other: 5 left, one free first`);
  });
});

/** The rate-limit counts in KV, summed. */
async function countsInKv(db: Db): Promise<{ entries: number; sum: number }> {
  let entries = 0;
  let sum = 0;
  for await (const entry of db.kv.list<number>({ prefix: ["rate"] })) {
    entries++;
    sum += entry.value;
  }
  return { entries, sum };
}

Deno.test("rate limit: alone, a repeat visitor under half the limit costs no KV write; from half the limit on each count is written", async () => {
  await withDb(async (db) => {
    const options = { max: 10, windowMs: 600_000, now: midWindow, processId: "p0" };
    const limiter = createRateLimiter(db, options);
    assert.equal(await admitted([limiter], "198.51.100.5", 4, db), 4);
    assert.deepEqual(await countsInKv(db), { entries: 0, sum: 0 });
    assert.equal(await admitted([limiter], "198.51.100.5", 1, db), 1);
    assert.deepEqual(await countsInKv(db), { entries: 1, sum: 5 }, "half the limit: written");
    assert.equal(await admitted([limiter], "198.51.100.5", 1, db), 1);
    assert.deepEqual(await countsInKv(db), { entries: 1, sum: 6 });
  });
});

Deno.test("rate limit: a process that stops writes the counts it kept to itself: its successor lets a client through at most one more", async () => {
  await withDb(async (db) => {
    const options = { max: 10, windowMs: 600_000, now: midWindow };
    const before = createRateLimiter(db, { ...options, processId: "before" });
    assert.equal(await admitted([before], "198.51.100.6", 3, db), 3);
    await before.flush();
    assert.deepEqual(await countsInKv(db), { entries: 1, sum: 3 });
    const after = createRateLimiter(db, { ...options, processId: "after" });
    const passed = await admitted([after], "198.51.100.6", 30, db);
    assert.ok(passed >= 7, `${passed}: at least what was left`);
    assert.ok(passed <= 8, `${passed} after the stop: 7 left, a restart one more`);
  });
});

Deno.test("rate limit: a process killed without its stop loses at most the counts under half the limit", async () => {
  await withDb(async (db) => {
    const options = { max: 10, windowMs: 600_000, now: midWindow };
    const killed = createRateLimiter(db, { ...options, processId: "killed" });
    assert.equal(await admitted([killed], "198.51.100.7", 4, db), 4);
    const after = createRateLimiter(db, { ...options, processId: "after" });
    const passed = await admitted([after], "198.51.100.7", 30, db);
    assert.ok(passed <= 10, `${passed} let through after the crash: at most the limit again`);
    // A client past half the limit before the crash is still held to what was written.
    assert.equal(await admitted([killed], "198.51.100.8", 8, db), 8);
    const afterMore = await admitted([after], "198.51.100.8", 30, db);
    assert.ok(afterMore <= 3, `${afterMore} after the crash: 2 left, a restart one more`);
  });
});

Deno.test("rate limit: a process that counted alone writes what it kept once it finds a newcomer's mark", async () => {
  await withDb(async (db) => {
    let t = midWindow();
    const options = { max: 10, windowMs: 600_000, now: () => t };
    const first = createRateLimiter(db, { ...options, processId: "first" });
    assert.equal(await admitted([first], "198.51.100.9", 3, db), 3);
    assert.equal((await countsInKv(db)).entries, 0, "alone: kept to itself");
    const newcomer = createRateLimiter(db, { ...options, processId: "newcomer" });
    await admitted([newcomer], "192.0.2.9", 1, db);
    t += 10_000;
    await admitted([first], "192.0.2.10", 1, db);
    // Its look at the marks runs beside the request: wait for its write.
    await waitFor(async () => (await countsInKv(db)).entries > 0, { message: "the kept count" });
    assert.deepEqual(await countsInKv(db), { entries: 1, sum: 3 }, "written at its next look");
    const passed = await admitted([newcomer], "198.51.100.9", 30, db);
    assert.ok(passed <= 8, `${passed} by the newcomer: 7 left, its free first one more`);
  });
});

Deno.test("rate limit: alone, a flood of other addresses does not reset a client's count either", async () => {
  await withDb(async (db) => {
    const options = { max: 60, windowMs: 600_000, now: midWindow, processId: "p0" };
    const limiter = createRateLimiter(db, options);
    assert.equal(await admitted([limiter], "203.0.113.8", 20, db), 20);
    for (let i = 0; i < 60_000; i++) {
      const slot = await limiter.reserve("f", `2001:db8:2::${i.toString(16)}`);
      if (!("retryAfter" in slot)) slot.count();
    }
    await limiter.flush();
    const more = await admitted([limiter], "203.0.113.8", 100, db);
    assert.ok(more <= 41, `${more} more let through after the flood: at most 40 + 1`);
    assert.ok(more >= 40, `${more}: the client still gets what it had left`);
  });
});
