import assert from "node:assert/strict";
import { createStallClock } from "./loop_stall.ts";

/** Blocks the thread for `ms`. */
function block(ms: number) {
  const until = performance.now() + ms;
  while (performance.now() < until) { /* busy */ }
}

/** Resolves after the event loop has run its timers once more. */
const nextTimers = () => new Promise((resolve) => setTimeout(resolve, 0));

Deno.test("a stall clock counts the time the thread was blocked while it was held", async () => {
  const clock = createStallClock();
  const release = clock.hold();
  const before = clock.read();
  block(120);
  // Read at once, before the late tick ran: the pending tick counts as late by now.
  const atOnce = clock.read() - before;
  // Less the tick's own 10 ms; more only when the machine itself held the thread back.
  assert.ok(atOnce >= 100 && atOnce <= 200, `counted ${atOnce} ms of a 120 ms block`);
  await nextTimers();
  release();
  const afterRelease = clock.read();
  assert.ok(afterRelease - before >= 100, `kept ${afterRelease - before} ms`);
  // Not held: nothing more is counted.
  block(50);
  await nextTimers();
  assert.equal(clock.read(), afterRelease);
});

Deno.test("a stall clock counts little on an idle loop", async () => {
  const clock = createStallClock();
  const release = clock.hold();
  const before = clock.read();
  const started = performance.now();
  while (performance.now() - started < 200) await new Promise((r) => setTimeout(r, 20));
  release();
  // Waiting on timers is not a stall (a loaded machine's late timers are, which is why the
  // bound is loose: a clock that counted the time held, not the time stalled, counts 200).
  assert.ok(clock.read() - before < 150, `counted ${clock.read() - before} ms while idle`);
});

Deno.test("a stall clock misses little of blocks that come one after another", async () => {
  const clock = createStallClock();
  const release = clock.hold();
  const before = clock.read();
  const blocks = 12;
  let blocked = 0;
  for (let i = 0; i < blocks; i++) {
    // A moment for the loop's timers, then the thread held again: as a burst of ingestion.
    await new Promise((resolve) => setTimeout(resolve, 1));
    const start = performance.now();
    block(40);
    blocked += performance.now() - start;
  }
  const counted = clock.read() - before;
  release();
  // The first block after an idle loop may go uncounted up to its tick's 10 ms; each
  // later one, a few ms at most (sampling every 10 ms missed about 10 ms of each).
  const missed = blocked - counted;
  assert.ok(missed < 40, `missed ${missed.toFixed(1)} ms of ${blocks} blocks of 40 ms`);
});
