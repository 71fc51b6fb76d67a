/** How busy acceptance is, as the delivery engine sees it (EngineDeps.ingestBurstMs). */
export interface IngestLoad {
  /** A submission starts being stored (sealed and committed). */
  enter(): void;
  /** It is stored, or failed. */
  leave(): void;
  /**
   * How long acceptance has been saturated without a break (a burst, not steady
   * traffic), in ms; null when it is not.
   */
  burstMs(): number | null;
}

/** Submissions being stored at once from which acceptance counts as saturated. */
const BUSY_IN_FLIGHT = 8;
/**
 * How long a burst counts after it was last seen: handlers finish together when their
 * shared commit lands, and for that instant nothing is in flight.
 */
const BUSY_HOLD_MS = 250;

/** A counter of submissions being stored, with a short memory of the last burst. */
export function createIngestLoad(now: () => number = () => performance.now()): IngestLoad {
  let inFlight = 0;
  let busyUntil = -Infinity;
  let burstStart: number | null = null;
  /** Whether a burst is on at `time`; notes when it began. */
  function busyAt(time: number): boolean {
    const busy = inFlight >= BUSY_IN_FLIGHT || time < busyUntil;
    if (!busy) burstStart = null;
    else burstStart ??= time;
    return busy;
  }
  return {
    enter() {
      const time = now();
      busyAt(time); // a burst that ended while nobody asked is over before this one counts
      if (++inFlight >= BUSY_IN_FLIGHT) {
        busyUntil = time + BUSY_HOLD_MS;
        busyAt(time);
      }
    },
    leave() {
      inFlight--;
    },
    burstMs() {
      const time = now();
      return busyAt(time) ? time - burstStart! : null;
    },
  };
}
