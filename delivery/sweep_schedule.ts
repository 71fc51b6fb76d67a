/**
 * When a process's background sweep runs. A sweep lists every unfinished job of the
 * deployment (there is no due-time index: store/job_record.ts), at 6–8 µs of the JS
 * thread a job (bench:sweep): 20 000 jobs take a sixth of a second, but a deployment that
 * holds a million (destinations paused for days, a raised backlog bound) would spend half
 * its thread sweeping every 15 s, and past two million a sweep would start before the last
 * one ended. So sweeps never overlap, and each waits after the one before for nine times
 * as long as that one took: sweeping takes at most a tenth of the time, and a sweep of a
 * small backlog keeps to SWEEP_INTERVAL_SECONDS as before. A sweep asked for meanwhile
 * (the interval's, or the waiting list's once it has room) runs when its turn comes.
 *
 * @module
 */

/** The most of the time background sweeps may take. */
export const SWEEP_SHARE = 0.1;

/** Background sweeps, one at a time. */
export interface SweepSchedule {
  /** Sweeps now, or once the sweep under way has ended and its wait is over. */
  request(): void;
  /** Runs no sweep that has not started yet. */
  close(): void;
}

/** Runs `sweep` (which logs its own failures) when asked, apart and within `share` of the time. */
export function createSweepSchedule(
  sweep: () => Promise<unknown>,
  options: {
    share?: number;
    now?: () => number;
    setTimer?: (run: () => void, ms: number) => () => void;
  } = {},
): SweepSchedule {
  const share = options.share ?? SWEEP_SHARE;
  const now = options.now ?? (() => performance.now());
  const setTimer = options.setTimer ?? ((run, ms) => {
    const timer = setTimeout(run, ms);
    return () => clearTimeout(timer);
  });
  let running = false;
  let asked = false;
  let notBefore = -Infinity;
  let cancelTimer: (() => void) | null = null;
  let closed = false;

  function run() {
    running = true;
    const started = now();
    // `sweep` reports its own failures: either way the turn is over.
    const over = () => {
      const ended = now();
      notBefore = ended + (ended - started) * (1 / share - 1);
      running = false;
      if (asked) {
        asked = false;
        request();
      }
    };
    sweep().then(over, over);
  }

  function request() {
    if (closed) return;
    if (running) {
      asked = true;
      return;
    }
    if (cancelTimer !== null) return;
    const waitMs = notBefore - now();
    if (waitMs <= 0) return run();
    cancelTimer = setTimer(() => {
      cancelTimer = null;
      request();
    }, waitMs);
  }

  return {
    request,
    close() {
      closed = true;
      cancelTimer?.();
      cancelTimer = null;
    },
  };
}
