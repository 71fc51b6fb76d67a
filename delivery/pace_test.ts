import assert from "node:assert/strict";
import { DeliveryError } from "../connectors/types.ts";
import type { PaceShare } from "../store/process_shares.ts";
import {
  createPace,
  MAX_DEFAULT_HOLD_MS,
  MIN_CEILING,
  RATE_CEILING,
  SHARE_ACTIVE_MS,
  signalOf,
} from "./pace.ts";

/** A pace on a clock the test moves. */
function harness(options: { initial?: number; max?: number } = {}) {
  let now = 1_000_000;
  const pace = createPace({
    initial: options.initial ?? 8,
    max: options.max ?? 128,
    now: () => now,
  });
  return {
    pace,
    advance(ms: number) {
      now += ms;
    },
    /** `count` deliveries to `id`, each taking `latencyMs`, with the destination's limit in flight. */
    deliver(id: string, count: number, latencyMs: number, inFlight?: number) {
      for (let i = 0; i < count; i++) {
        now += 1;
        pace.record(id, { kind: "delivered", latencyMs }, inFlight ?? pace.limit(id));
      }
    },
  };
}

Deno.test("a fast receiver's concurrency grows from where it starts up to the cap", () => {
  const h = harness({ initial: 8, max: 128 });
  assert.equal(h.pace.limit("d"), 8);
  h.deliver("d", 8, 100);
  assert.equal(h.pace.limit("d"), 16, "slow start: doubled in one round of answers");
  h.deliver("d", 300, 100);
  assert.equal(h.pace.limit("d"), 128, "up to DESTINATION_MAX_CONCURRENCY, no further");
  assert.equal(h.pace.limit("other"), 8, "each destination has its own");
});

Deno.test("a receiver's concurrency grows only as far as its latency needs for the rate ceiling", () => {
  const h = harness({ initial: 8, max: 1000 });
  h.deliver("instant", 2000, 1);
  assert.equal(h.pace.limit("instant"), MIN_CEILING, "answering at once: the floor, not the cap");
  h.deliver("40ms", 2000, 40);
  assert.equal(h.pace.limit("40ms"), Math.ceil(0.04 * RATE_CEILING), "Little's law at 40 ms");
  h.deliver("1s", 4000, 1000);
  assert.equal(h.pace.limit("1s"), 1000, "a slow receiver up to the cap");
});

Deno.test("a destination that uses less than half its limit does not grow", () => {
  const h = harness();
  h.deliver("d", 50, 100, 2);
  assert.equal(h.pace.limit("d"), 8);
});

Deno.test("time-outs and errors halve the concurrency, once for the attempts in flight together", () => {
  const h = harness();
  h.deliver("d", 24, 50);
  assert.equal(h.pace.limit("d"), 32);
  for (let i = 0; i < 10; i++) h.pace.record("d", { kind: "overloaded", latencyMs: 50 }, 32);
  assert.equal(h.pace.limit("d"), 16, "ten failures sent together cut once");
  h.advance(10);
  h.pace.record("d", { kind: "overloaded", latencyMs: 50 }, 16);
  assert.equal(h.pace.limit("d"), 16, "one sent before the cut: that cut answered it");
  h.pace.record("d", { kind: "overloaded", latencyMs: 5 }, 16);
  assert.equal(h.pace.limit("d"), 8, "one sent after the cut: the smaller limit is too much too");
  for (let i = 0; i < 20; i++) {
    h.advance(1000);
    h.pace.record("d", { kind: "overloaded", latencyMs: 1 }, 1);
  }
  assert.equal(h.pace.limit("d"), 1, "never below one");
  h.deliver("d", 10, 50);
  const grown = h.pace.limit("d");
  assert.ok(grown >= 3 && grown < 6, `grew to ${grown}: by one per round trip, not doubling`);
});

Deno.test("rising latency is measured afresh at low concurrency: slower with load is cut back, slower anyway is taken as it is", () => {
  for (
    const [receiver, lowLoadMs, expected] of [["slower with load", 20, 28], [
      "slower anyway",
      300,
      32,
    ]] as const
  ) {
    const h = harness();
    h.deliver("d", 24, 20);
    assert.equal(h.pace.limit("d"), 32);
    h.advance(300);
    h.pace.record("d", { kind: "delivered", latencyMs: 300 }, 32);
    assert.equal(h.pace.limit("d"), 2, `${receiver}: held low while measuring`);
    // Five deliveries started under the measure, answered as the receiver does at low load.
    for (let i = 0; i < 5; i++) {
      h.advance(lowLoadMs);
      h.pace.record("d", { kind: "delivered", latencyMs: lowLoadMs }, 2);
    }
    assert.equal(h.pace.limit("d"), 32, `${receiver}: the measure is over`);
    // Back at 32 in flight, answers take 300 ms again.
    h.advance(300);
    h.deliver("d", 30, 300, 32);
    if (expected === 28) assert.equal(h.pace.limit("d"), 28, `${receiver}: a tenth off`);
    else assert.ok(h.pace.limit("d") > 32, `${receiver}: grows on (${h.pace.limit("d")})`);
  }
});

/**
 * Runs a simulated receiver against a pace for `seconds` on the test's clock, 1 ms a
 * step: `answer(inFlight)` says how long a request started with that many in flight
 * takes, or "timeout" for one that fails after 2 s.
 */
function simulate(seconds: number, answer: (inFlight: number) => number | "timeout") {
  const h = harness();
  let running: { end: number; start: number; timeout: boolean }[] = [];
  let maxInFlight = 0, delivered = 0, timeouts = 0;
  for (let t = 0; t < seconds * 1000; t++) {
    h.advance(1);
    const done = running.filter((r) => r.end <= t);
    running = running.filter((r) => r.end > t);
    for (const [i, r] of done.entries()) {
      const inFlight = running.length + done.length - i;
      if (r.timeout) timeouts++;
      else delivered++;
      h.pace.record(
        "d",
        r.timeout
          ? { kind: "overloaded", latencyMs: t - r.start }
          : { kind: "delivered", latencyMs: t - r.start },
        inFlight,
      );
    }
    while (running.length < h.pace.limit("d") && h.pace.waitMs("d") === 0) {
      h.pace.started("d");
      const ms = answer(running.length + 1);
      running.push(
        ms === "timeout"
          ? { end: t + 2000, start: t, timeout: true }
          : { end: t + ms, start: t, timeout: false },
      );
      maxInFlight = Math.max(maxInFlight, running.length);
    }
  }
  // Its concurrency, not what it may start now: a fresh measure of the lowest latency may be under way.
  return { maxInFlight, delivered, timeouts, concurrency: h.pace.view("d").concurrency };
}

Deno.test("a receiver that slows with load keeps few in flight and never times out, minutes on", () => {
  // 20 ms × in flight, a time-out past 2 s: 50 a second whatever the concurrency.
  const run = simulate(300, (inFlight) => inFlight * 20 > 2000 ? "timeout" : inFlight * 20);
  assert.equal(run.timeouts, 0);
  assert.ok(run.maxInFlight <= 20, `at most ${run.maxInFlight} in flight`);
  assert.ok(run.delivered >= 14_000, `${run.delivered} delivered in 300 s`);
});

Deno.test("a receiver answering in 100 ms whatever the load gets the cap", () => {
  const run = simulate(60, () => 100);
  assert.equal(run.concurrency, 128);
  assert.ok(run.delivered >= 60_000, `${run.delivered} delivered in 60 s`);
});

Deno.test("a refusal for rate holds the destination for its Retry-After, then spaces starts to the rate it accepted", () => {
  const h = harness();
  // Five accepted in the last second, then a 429 with Retry-After: 1.
  h.deliver("d", 5, 10);
  h.pace.record("d", { kind: "limited", hint: { limited: true, retryAfterMs: 1000 } }, 4);
  assert.equal(h.pace.waitMs("d"), 1000, "held for the Retry-After");
  assert.equal(h.pace.waitMs("other"), 0, "only that destination");
  const view = h.pace.view("d");
  assert.ok(view.heldUntil !== null);
  assert.ok(view.ratePerSecond! > 4 && view.ratePerSecond! < 5, `${view.ratePerSecond}/s`);
  // The other attempts in flight when it refused come back refused too: no second cut.
  h.pace.record("d", { kind: "limited", hint: { limited: true, retryAfterMs: 1000 } }, 3);
  assert.equal(h.pace.view("d").ratePerSecond, view.ratePerSecond);
  h.advance(1000);
  assert.equal(h.pace.waitMs("d"), 0, "the hold is over");
  h.pace.started("d");
  const spacing = h.pace.waitMs("d");
  assert.ok(spacing > 200 && spacing < 250, `the next start waits ${spacing} ms (about 1/4.5 s)`);
});

Deno.test("refusals without Retry-After hold for a second, doubling while they go on", () => {
  const h = harness();
  const refuse = () => h.pace.record("d", { kind: "limited", hint: { limited: true } }, 1);
  refuse();
  assert.equal(h.pace.waitMs("d"), 1000);
  assert.equal(h.pace.view("d").ratePerSecond, 1, "nothing accepted yet: one a second");
  h.advance(1000);
  refuse();
  assert.equal(h.pace.waitMs("d"), 2000);
  for (let i = 0; i < 20; i++) {
    h.advance(h.pace.waitMs("d"));
    refuse();
  }
  assert.equal(h.pace.waitMs("d"), MAX_DEFAULT_HOLD_MS, "up to a ceiling");
  h.advance(MAX_DEFAULT_HOLD_MS);
  h.deliver("d", 1, 10);
  refuse();
  assert.equal(h.pace.waitMs("d"), 1000, "a delivery starts the doubling afresh");
});

Deno.test("a receiver down for a while (503 with Retry-After) is held, not kept to a rate; refusals with nothing accepted keep the rate", () => {
  const h = harness();
  h.deliver("d", 5, 10);
  h.pace.record("d", {
    kind: "limited",
    hint: { limited: true, unavailable: true, retryAfterMs: 2000 },
  }, 1);
  assert.equal(h.pace.waitMs("d"), 2000);
  assert.equal(h.pace.view("d").ratePerSecond, null);
  // A 429 sets a rate; later refusals with nothing accepted in between leave it as it is.
  h.advance(10_000);
  h.deliver("e", 5, 10);
  h.pace.record("e", { kind: "limited", hint: { limited: true, retryAfterMs: 1000 } }, 1);
  const rate = h.pace.view("e").ratePerSecond;
  for (let i = 0; i < 4; i++) {
    h.advance(h.pace.waitMs("e") + 2000);
    h.pace.record("e", { kind: "limited", hint: { limited: true, retryAfterMs: 1000 } }, 1);
  }
  assert.equal(h.pace.view("e").ratePerSecond, rate);
});

Deno.test("a quota that runs out holds the destination until its reset, with no refusal", () => {
  const h = harness();
  const answer = (id: string, remaining: number) =>
    h.pace.record(
      id,
      { kind: "delivered", latencyMs: 10, hint: { remaining, resetAfterMs: 1500 } },
      1,
    );
  answer("d", 0);
  assert.equal(h.pace.waitMs("d"), 1500);
  assert.equal(h.pace.view("d").ratePerSecond, null);
  answer("e", 3);
  assert.equal(h.pace.waitMs("e"), 0);
});

Deno.test("signalOf reads an attempt's result", () => {
  const failure = (error: DeliveryError) => ({
    delivered: false as const,
    failure: error,
    unexpected: false,
  });
  assert.deepEqual(signalOf({ delivered: true, receipt: { statusCode: 200 } }, 12), {
    kind: "delivered",
    latencyMs: 12,
    hint: undefined,
  });
  const limited = new DeliveryError("429", {
    permanent: false,
    statusCode: 429,
    pace: { limited: true, retryAfterMs: 1000 },
  });
  assert.equal(signalOf(failure(limited), 1).kind, "limited");
  assert.equal(
    signalOf(failure(new DeliveryError("time-out", { permanent: false })), 1).kind,
    "overloaded",
  );
  assert.equal(
    signalOf(failure(new DeliveryError("503", { permanent: false, statusCode: 503 })), 1).kind,
    "overloaded",
  );
  assert.equal(
    signalOf(failure(new DeliveryError("404", { permanent: true, statusCode: 404 })), 1).kind,
    "neutral",
  );
  assert.equal(
    signalOf(
      failure(new DeliveryError("422", { permanent: true, statusCode: 422, blame: "submission" })),
      1,
    ).kind,
    "neutral",
  );
  assert.equal(signalOf({ delivered: false, held: true }, 1).kind, "neutral");
});

Deno.test("signalOf judges the receiver's time, not what this process kept it waiting", () => {
  const timing = { receiverMs: 3, ownMs: 117 };
  assert.deepEqual(signalOf({ delivered: true, receipt: { statusCode: 200 }, timing }, 125), {
    kind: "delivered",
    latencyMs: 3,
    hint: undefined,
  });
  const timedOut = new DeliveryError("no answer within 10000 ms", { permanent: false });
  // A time-out mostly spent on a blocked thread says nothing of the receiver...
  assert.equal(
    signalOf({
      delivered: false,
      failure: timedOut,
      unexpected: false,
      timing: { receiverMs: 4000, ownMs: 6000 },
    }, 10_010).kind,
    "neutral",
  );
  // ...one the receiver took is its strain, and a 503 is whatever the thread did.
  assert.deepEqual(
    signalOf({
      delivered: false,
      failure: timedOut,
      unexpected: false,
      timing: { receiverMs: 9990, ownMs: 10 },
    }, 10_010),
    { kind: "overloaded", latencyMs: 10_010 },
  );
  const unavailable = new DeliveryError("503", { permanent: false, statusCode: 503 });
  assert.equal(
    signalOf({
      delivered: false,
      failure: unavailable,
      unexpected: false,
      timing: { receiverMs: 1, ownMs: 50 },
    }, 51).kind,
    "overloaded",
  );
});

/**
 * `processes` paces on one clock delivering to one receiver that answers in 20 ms, but
 * at once with a 503 whenever more than 20 requests are in flight at it; each process
 * always has work. They exchange shares as the engine does: at the start, soon after,
 * then every second. Returns refusals per attempt and deliveries a second.
 */
function atCapacity(processes: number, seconds: number) {
  let now = 1_000_000;
  const paces = Array.from(
    { length: processes },
    () => createPace({ initial: 8, max: 128, now: () => now }),
  );
  const running: { process: number; end: number; start: number; refused: boolean }[] = [];
  let attempts = 0, refused = 0, delivered = 0;
  const exchange = () => {
    const shares = paces.map((pace) => pace.shares());
    paces.forEach((pace, i) => {
      const others = new Map<string, PaceShare[]>();
      shares.forEach((mine, j) => {
        if (j === i) return;
        for (const [id, share] of mine) others.set(id, [...(others.get(id) ?? []), share]);
      });
      pace.merge(others);
    });
  };
  for (let t = 0; t < seconds * 1000; t++) {
    now++;
    if (t === 5 || t === 50 || t === 250 || t % 1000 === 0) exchange();
    for (let i = running.length - 1; i >= 0; i--) {
      const r = running[i];
      if (r.end > t) continue;
      running.splice(i, 1);
      const inFlight = running.filter((x) => x.process === r.process).length + 1;
      paces[r.process].record(
        "d",
        r.refused
          ? { kind: "overloaded", latencyMs: t - r.start }
          : { kind: "delivered", latencyMs: t - r.start },
        inFlight,
      );
    }
    paces.forEach((pace, process) => {
      while (
        running.filter((r) => r.process === process).length < pace.limit("d") &&
        pace.waitMs("d") === 0
      ) {
        pace.started("d");
        attempts++;
        const full = running.filter((r) => !r.refused).length >= 20;
        if (full) refused++;
        else delivered++;
        running.push({ process, start: t, end: t + (full ? 1 : 20), refused: full });
      }
    });
  }
  return { refusedShare: refused / attempts, perSecond: delivered / seconds };
}

Deno.test("a receiver at capacity (503 past 20 in flight) refuses under 5 % of attempts, for one process and four sharing their paces", () => {
  for (const processes of [1, 4]) {
    const { refusedShare, perSecond } = atCapacity(processes, 20);
    assert.ok(
      refusedShare <= 0.05,
      `${processes}: ${(refusedShare * 100).toFixed(1)} % of attempts refused`,
    );
    // 20 in flight at 20 ms would be 1 000 a second: most of it is used.
    assert.ok(perSecond >= 600, `${processes}: ${perSecond.toFixed(0)} deliveries a second`);
  }
});

Deno.test("processes sharing paces split a destination's cap and take up each other's holds, rates and cuts", () => {
  let now = 1_000_000;
  const make = () => createPace({ initial: 8, max: 128, now: () => now });
  const [a, b] = [make(), make()];
  for (let i = 0; i < 2000; i++) {
    now++;
    a.record("d", { kind: "delivered", latencyMs: 1000 }, a.limit("d"));
  }
  assert.equal(a.limit("d"), 128, "alone: the whole cap");
  const share = (pace: typeof a) => new Map([...pace.shares()].map(([id, s]) => [id, [s]]));
  a.merge(share(b));
  assert.equal(a.limit("d"), 128, "b has not delivered to it: nothing shared");
  b.started("d");
  a.merge(share(b));
  b.merge(share(a));
  assert.equal(a.limit("d"), 64, "two processes: half the cap each");
  assert.ok(b.limit("d") <= 64, `b keeps to its half too (${b.limit("d")})`);
  // b is refused for rate with Retry-After 30 s: a holds and keeps to b's rate after one exchange.
  b.record("d", { kind: "limited", hint: { limited: true, retryAfterMs: 30_000 } }, 1);
  assert.equal(b.view("d").ratePerSecond, 0.5, "nothing accepted: its half of the first guess");
  assert.equal(a.waitMs("d"), 0);
  a.merge(share(b));
  assert.ok(a.waitMs("d") >= 29_000, `a holds with b (${a.waitMs("d")} ms)`);
  assert.notEqual(a.view("d").ratePerSecond, null, "and keeps to a rate after the hold");
  assert.equal(a.limit("d"), 32, "b's cut is taken up: the receiver had too much from both");
  a.merge(share(b));
  assert.equal(a.limit("d"), 32, "once per cut, however often it is shared");
  // A process that has not delivered there yet learns of the hold before its first start.
  const c = make();
  c.merge(share(b));
  assert.ok(c.waitMs("d") >= 29_000, "c holds before its first start");
  now += SHARE_ACTIVE_MS + 1;
  assert.equal(b.shares().size, 0, "a destination not used lately is no longer shared");
});
