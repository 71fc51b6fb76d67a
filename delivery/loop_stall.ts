/**
 * How long this process's event loop kept its callbacks waiting: the pace's measure of
 * a receiver's latency leaves that time out (pace.ts). An attempt's answer that came at
 * once still waits for the thread to finish what it is doing (an ingestion burst, a
 * sealing, a commit's callback), and that wait says nothing about the receiver.
 *
 * A timer runs while at least one attempt holds the clock; how late each one fires, past
 * TIMER_SLACK_MS, adds to the stall. `read()` counts the tick that is due and has not
 * fired yet as late by now, so a block the reader is itself just out of is counted as
 * soon as it ends. A block that starts before a tick is due goes uncounted up to the
 * tick's period, once per block: so the timer ticks every TICK_MS on an idle loop (each
 * wake-up of an idle process costs CPU), and every BUSY_TICK_MS for BUSY_SPELL_MS after
 * a late one, when blocks come one after another and each would add its miss.
 *
 * @module
 */

/** How often the loop is sampled while attempts are under way: on an idle loop... */
const TICK_MS = 10;
/** ...and for a while after a late tick. */
const BUSY_TICK_MS = 2;
const BUSY_SPELL_MS = 250;
/** Lateness of a timer on an idle loop: not a stall. */
const TIMER_SLACK_MS = 1;

/** Milliseconds the event loop has stalled, counted while held. */
export interface StallClock {
  /** The stall counted so far, ms (only differences between two reads mean anything). */
  read(): number;
  /** Counts from now on until the returned release is called (held by each attempt). */
  hold(): () => void;
}

/** A stall clock, sampling the loop only while held. */
export function createStallClock(): StallClock {
  let stalled = 0;
  let holders = 0;
  let due = 0;
  let busyUntil = 0;
  let timer: ReturnType<typeof setTimeout> | null = null;

  /** How late the pending tick is by `now`, past an idle loop's slack. */
  const lateBy = (now: number) => Math.max(0, now - due - TIMER_SLACK_MS);

  /** Counts the pending tick's lateness by `now`, as if it fired then. */
  function count(now: number) {
    const late = lateBy(now);
    stalled += late;
    // Past an idle loop's jitter: a block.
    if (late > BUSY_TICK_MS) busyUntil = now + BUSY_SPELL_MS;
    timer = null;
  }

  function tick() {
    const now = performance.now();
    count(now);
    schedule(now);
  }

  function schedule(now: number) {
    if (holders === 0 || timer !== null) return;
    const period = now < busyUntil ? BUSY_TICK_MS : TICK_MS;
    due = now + period;
    timer = setTimeout(tick, period);
    // Deno timer ids are numbers; node's typings, when loaded, say Timeout.
    Deno.unrefTimer(Number(timer));
  }

  function read() {
    if (timer === null) return stalled;
    return stalled + lateBy(performance.now());
  }

  return {
    read,
    hold() {
      holders++;
      schedule(performance.now());
      let held = true;
      return () => {
        if (!held) return;
        held = false;
        holders--;
        if (holders > 0 || timer === null) return;
        // The last one out: what the pending tick would have counted is counted now.
        clearTimeout(timer);
        count(performance.now());
      };
    },
  };
}
