/**
 * The backlog bound on acceptance: a submission is admitted only while the jobs due in
 * this process (waiting for a slot or in progress, counted by the dispatcher) are under
 * the process's bound and its organization's share of it. Room is reserved from
 * admission until the submission's jobs are woken, so concurrent submissions cannot
 * overshoot by more than one submission's jobs.
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
}

/** An admission over `backlog`, the dispatcher's count of jobs due here. */
export function createAdmission(
  backlog: (orgId: string) => { total: number; org: number },
  bound: BacklogBound,
): Admission {
  const perOrg = Math.max(1, Math.floor(bound.maxJobs * bound.orgShare));
  const reservedByOrg = new Map<string, number>();
  let reserved = 0;
  return {
    admit(orgId, jobs) {
      const now = backlog(orgId);
      const orgReserved = reservedByOrg.get(orgId) ?? 0;
      if (now.total + reserved >= bound.maxJobs || now.org + orgReserved >= perOrg) return null;
      reserved += jobs;
      reservedByOrg.set(orgId, orgReserved + jobs);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        reserved -= jobs;
        const left = reservedByOrg.get(orgId)! - jobs;
        if (left === 0) reservedByOrg.delete(orgId);
        else reservedByOrg.set(orgId, left);
      };
    },
  };
}
