import assert from "node:assert/strict";
import { createSweepSchedule } from "./sweep_schedule.ts";

/** A schedule on a clock and timers the test moves, over sweeps it ends. */
function scheduled() {
  let clock = 0;
  const timers: { at: number; run: () => void }[] = [];
  const sweeps: PromiseWithResolvers<void>[] = [];
  const schedule = createSweepSchedule(() => {
    const sweep = Promise.withResolvers<void>();
    sweeps.push(sweep);
    return sweep.promise;
  }, {
    share: 0.1,
    now: () => clock,
    setTimer(run, ms) {
      const timer = { at: clock + ms, run };
      timers.push(timer);
      return () => timers.splice(timers.indexOf(timer), 1);
    },
  });
  return {
    schedule,
    sweeps,
    timers,
    /** Moves the clock to `ms`, running the timers due by then. */
    at(ms: number) {
      clock = ms;
      for (const timer of timers.filter((t) => t.at <= ms)) {
        timers.splice(timers.indexOf(timer), 1);
        timer.run();
      }
    },
    /** Ends the sweep under way at `ms`. */
    async end(ms: number) {
      clock = ms;
      const sweep = sweeps.at(-1)!;
      sweep.resolve();
      // The schedule's reaction to the end was registered first: it has run by now.
      await sweep.promise;
    },
  };
}

Deno.test("a sweep asked for while one is under way runs after it, not beside it", async () => {
  const s = scheduled();
  s.schedule.request();
  s.schedule.request();
  assert.equal(s.sweeps.length, 1);
  // A sweep of 10 ms: the one asked for meanwhile runs once its 90 ms wait is over.
  await s.end(10);
  assert.equal(s.sweeps.length, 1);
  s.at(99);
  assert.equal(s.sweeps.length, 1);
  s.at(100);
  assert.equal(s.sweeps.length, 2);
});

Deno.test("after a sweep the next waits nine times as long as it took", async () => {
  const s = scheduled();
  s.at(1_000);
  s.schedule.request();
  // 9 s of listing (a million jobs): the next may start 81 s after it ended.
  await s.end(10_000);
  s.schedule.request();
  s.schedule.request();
  assert.equal(s.sweeps.length, 1);
  assert.deepEqual(s.timers.map((t) => t.at), [91_000]);
  s.at(90_999);
  assert.equal(s.sweeps.length, 1);
  s.at(91_000);
  assert.equal(s.sweeps.length, 2);
});

Deno.test("a quick sweep keeps the interval", async () => {
  const s = scheduled();
  s.schedule.request();
  await s.end(200);
  s.at(15_000);
  s.schedule.request();
  assert.equal(s.sweeps.length, 2);
});

Deno.test("a failed sweep ends its turn like any other", async () => {
  const s = scheduled();
  s.schedule.request();
  s.sweeps[0].reject(new Error("KV unavailable"));
  await s.sweeps[0].promise.catch(() => {});
  s.at(100);
  s.schedule.request();
  assert.equal(s.sweeps.length, 2);
});

Deno.test("a closed schedule starts nothing more", async () => {
  const s = scheduled();
  s.schedule.request();
  await s.end(1_000);
  s.schedule.request();
  assert.equal(s.timers.length, 1);
  s.schedule.close();
  assert.equal(s.timers.length, 0);
  s.at(20_000);
  s.schedule.request();
  assert.equal(s.sweeps.length, 1);
});

Deno.test("an explicit sweep waits for the background sweep under way, and is a turn", async () => {
  const s = scheduled();
  s.schedule.request();
  let explicitRan = false;
  const explicit = s.schedule.explicit(() => {
    explicitRan = true;
    return Promise.resolve(7);
  });
  await Promise.resolve();
  assert.equal(explicitRan, false);
  // The background sweep ends at 10 ms; the explicit one starts then and takes none.
  await s.end(10);
  assert.equal(await explicit, 7);
  assert.equal(explicitRan, true);
  // A background sweep asked for now waits the explicit one's turn, which took no time.
  s.schedule.request();
  assert.equal(s.sweeps.length, 2);
});

Deno.test("a background sweep asked for during an explicit one runs after it", async () => {
  const s = scheduled();
  const explicitSweep = Promise.withResolvers<number>();
  const explicit = s.schedule.explicit(() => explicitSweep.promise);
  s.schedule.request();
  assert.equal(s.sweeps.length, 0);
  // 20 ms of explicit sweep: the background one may start 180 ms after it.
  s.at(20);
  explicitSweep.resolve(3);
  assert.equal(await explicit, 3);
  await Promise.resolve();
  assert.deepEqual(s.timers.map((t) => t.at), [200]);
  s.at(200);
  assert.equal(s.sweeps.length, 1);
});

Deno.test("an explicit sweep's failure is its caller's, and ends its turn", async () => {
  const s = scheduled();
  await assert.rejects(
    s.schedule.explicit(() => Promise.reject(new Error("KV unavailable"))),
    /KV unavailable/,
  );
  s.schedule.request();
  assert.equal(s.sweeps.length, 1);
});
