/**
 * When a process's background sweep runs. A sweep lists every unfinished job of the
 * deployment (there is no due-time index: store/job_record.ts), at 6–8 µs of the JS
 * thread a job (bench:sweep): 20 000 jobs take a sixth of a second, but a deployment that
 * holds a million (destinations paused for days, a raised backlog bound) would spend half
 * its thread sweeping every 15 s, and past two million a sweep would start before the last
 * one ended. So sweeps never overlap, and each waits after the one before for nine times
 * as long as that one took: sweeping takes at most a tenth of the time, and a sweep of a
 * small backlog keeps to SWEEP_INTERVAL_SECONDS as before. A sweep asked for meanwhile
 * (the interval's, or the waiting list's once it has room) runs when its turn comes. An
 * explicit sweep (Deno Deploy's cron, tests) is not put off by the wait, but it too waits
 * for the sweep under way, and counts as a turn.
 *
 * @module
 */

/** The most of the time background sweeps may take. */
export const SWEEP_SHARE = 0.1;

/** Background sweeps, one at a time. */
export interface SweepSchedule {
  /** Sweeps now, or once the sweep under way has ended and its wait is over. */
  request(): void;
  /**
   * Runs `sweep` once the sweep under way, if any, has ended (never beside it), and
   * resolves or rejects as it does; background sweeps asked for meanwhile wait for it.
   */
  explicit<T>(sweep: () => Promise<T>): Promise<T>;
  /** Runs no background sweep that has not started yet. */
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
  /** The sweep under way, settled or not, until its turn is over. */
  let running: Promise<unknown> | null = null;
  let asked = false;
  let notBefore = -Infinity;
  let cancelTimer: (() => void) | null = null;
  let closed = false;

  /** Runs a sweep as this process's one sweep under way. */
  function run<T>(sweep: () => Promise<T>): Promise<T> {
    const started = now();
    const swept = sweep();
    // Either way the turn is over (a background sweep reports its own failures).
    const over = () => {
      const ended = now();
      notBefore = ended + (ended - started) * (1 / share - 1);
      running = null;
      if (asked) {
        asked = false;
        request();
      }
    };
    running = swept.then(over, over);
    return swept;
  }

  function request() {
    if (closed) return;
    if (running !== null) {
      asked = true;
      return;
    }
    if (cancelTimer !== null) return;
    const waitMs = notBefore - now();
    if (waitMs <= 0) {
      run(sweep);
      return;
    }
    cancelTimer = setTimer(() => {
      cancelTimer = null;
      request();
    }, waitMs);
  }

  return {
    request,
    async explicit(sweep) {
      // Several may be waiting: each goes once none is under way.
      while (running !== null) await running;
      return run(sweep);
    },
    close() {
      closed = true;
      cancelTimer?.();
      cancelTimer = null;
    },
  };
}
