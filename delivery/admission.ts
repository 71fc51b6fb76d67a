/**
 * The backlog bound on acceptance: a submission is admitted only while the jobs due in
 * this process (waiting for a slot or in progress, counted by the dispatcher) are under
 * the process's bound and its organization's share of it. Room is reserved from
 * admission until the submission's jobs are woken, so concurrent submissions cannot
 * overshoot by more than one submission's jobs.
 *
 * A submission that finds the backlog full may wait a moment for room (waitForRoom):
 * a spike is then absorbed at the pace deliveries free room, rather than refused in
 * waves. Waiters are admitted in arrival order as jobs leave the backlog (freed), one
 * organization's full share never holding back another's waiter.
 *
 * @module
 */

/** The bound: jobs due at most in this process, and the share one organization may fill. */
export interface BacklogBound {
  maxJobs: number;
  /** 0 < share <= 1; an organization may fill at least one job. */
  orgShare: number;
}

/** Admits submissions while the backlog is under its bound. */
export interface Admission {
  /**
   * Reserves room for `jobs` new jobs of an organization; returns the release (call it
   * once the jobs are woken, or were not stored), or null when the backlog is full.
   */
  admit(orgId: string, jobs: number): (() => void) | null;
  /**
   * Like admit, but a full backlog is waited on for room, at most `timeoutMs`: resolves
   * to the release, or null when no room came in time.
   */
  waitForRoom(orgId: string, jobs: number, timeoutMs: number): Promise<(() => void) | null>;
  /** Jobs left the backlog (delivered, or given up here): waiters that now fit are admitted. */
  freed(): void;
}

/** A submission waiting for room, until its timer gives up. */
interface Waiter {
  orgId: string;
  jobs: number;
  admitted(release: (() => void) | null): void;
}

/** The jobs one organization may have in the backlog: its share, at least one. */
export function orgBacklogShare(bound: BacklogBound): number {
  return Math.max(1, Math.floor(bound.maxJobs * bound.orgShare));
}

/** An admission over `backlog`, the dispatcher's count of jobs due here. */
export function createAdmission(
  backlog: (orgId: string) => { total: number; org: number },
  bound: BacklogBound,
): Admission {
  const perOrg = orgBacklogShare(bound);
  const reservedByOrg = new Map<string, number>();
  let reserved = 0;
  /** In arrival order; short (one per request waiting, each for a moment). */
  const waiters = new Set<Waiter>();

  function admit(orgId: string, jobs: number): (() => void) | null {
    const now = backlog(orgId);
    const orgReserved = reservedByOrg.get(orgId) ?? 0;
    if (now.total + reserved >= bound.maxJobs || now.org + orgReserved >= perOrg) return null;
    return reserve(orgId, jobs);
  }

  /** Admits the waiters that fit now, in arrival order. */
  function freed() {
    for (const waiter of waiters) {
      // The process's bound is full: no waiter fits, whichever its organization.
      if (backlog(waiter.orgId).total + reserved >= bound.maxJobs) return;
      const release = admit(waiter.orgId, waiter.jobs);
      if (release === null) continue;
      waiters.delete(waiter);
      waiter.admitted(release);
    }
  }

  /** Reserves room for `jobs` of an organization; returns its release. */
  function reserve(orgId: string, jobs: number): () => void {
    reserved += jobs;
    reservedByOrg.set(orgId, (reservedByOrg.get(orgId) ?? 0) + jobs);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      reserved -= jobs;
      const left = reservedByOrg.get(orgId)! - jobs;
      if (left === 0) reservedByOrg.delete(orgId);
      else reservedByOrg.set(orgId, left);
      // Room reserved by a submission that stored no job is room again.
      if (waiters.size > 0) freed();
    };
  }

  return {
    admit,
    freed() {
      if (waiters.size > 0) freed();
    },
    waitForRoom(orgId, jobs, timeoutMs) {
      const now = admit(orgId, jobs);
      if (now !== null) return Promise.resolve(now);
      return new Promise((resolve) => {
        const waiter: Waiter = {
          orgId,
          jobs,
          admitted(release) {
            clearTimeout(timer);
            resolve(release);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          resolve(null);
        }, timeoutMs);
        waiters.add(waiter);
      });
    },
  };
}
