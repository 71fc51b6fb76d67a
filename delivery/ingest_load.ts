/**
 * How busy acceptance is for each organization, as the delivery engine sees it
 * (EngineDeps.ingestBurstMs): a burst on one tenant's forms holds back that tenant's
 * deliveries for a moment, never another tenant's.
 *
 * @module
 */

/** How busy acceptance is, per organization. */
export interface IngestLoad {
  /** A submission of `orgId` starts being stored (sealed and committed). */
  enter(orgId: string): void;
  /** It is stored, or failed. */
  leave(orgId: string): void;
  /**
   * How long acceptance for `orgId` has been saturated without a break (a burst, not
   * steady traffic), in ms; null when it is not.
   */
  burstMs(orgId: string): number | null;
}

/** Submissions of one organization being stored at once from which its acceptance counts as saturated. */
const BUSY_IN_FLIGHT = 8;
/**
 * How long a burst counts after it was last seen: handlers finish together when their
 * shared commit lands, and for that instant nothing is in flight.
 */
const BUSY_HOLD_MS = 250;

/** One organization's submissions being stored, with a short memory of its last burst. */
interface OrgLoad {
  inFlight: number;
  busyUntil: number;
  burstStart: number | null;
}

/** Counters of submissions being stored, per organization. */
export function createIngestLoad(now: () => number = () => performance.now()): IngestLoad {
  // Only organizations storing now or in a burst are kept.
  const orgs = new Map<string, OrgLoad>();

  /** Whether a burst is on at `time`; notes when it began, forgets an organization at rest. */
  function busyAt(orgId: string, load: OrgLoad, time: number): boolean {
    const busy = load.inFlight >= BUSY_IN_FLIGHT || time < load.busyUntil;
    if (busy) load.burstStart ??= time;
    else if (load.inFlight === 0) orgs.delete(orgId);
    else load.burstStart = null;
    return busy;
  }

  return {
    enter(orgId) {
      const time = now();
      let load = orgs.get(orgId);
      // A burst that ended while nobody asked is over before this one counts.
      if (load !== undefined && !busyAt(orgId, load, time)) load = orgs.get(orgId);
      if (load === undefined) {
        orgs.set(orgId, load = { inFlight: 0, busyUntil: -Infinity, burstStart: null });
      }
      if (++load.inFlight >= BUSY_IN_FLIGHT) {
        load.busyUntil = time + BUSY_HOLD_MS;
        busyAt(orgId, load, time);
      }
    },
    leave(orgId) {
      const load = orgs.get(orgId);
      if (load !== undefined) load.inFlight--;
    },
    burstMs(orgId) {
      const load = orgs.get(orgId);
      if (load === undefined) return null;
      const time = now();
      return busyAt(orgId, load, time) ? time - load.burstStart! : null;
    },
  };
}
