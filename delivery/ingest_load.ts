/** How busy acceptance is, as the delivery engine sees it (EngineDeps.ingestBusy). */
export interface IngestLoad {
  enter(): void;
  leave(): void;
  /** Whether acceptance is saturated (a burst, not steady traffic): deliveries give way. */
  busy(): boolean;
}

/** Submissions in the handler at once from which acceptance counts as saturated. */
const BUSY_IN_FLIGHT = 8;
/**
 * How long a burst counts after it was last seen: handlers finish together when their
 * shared commit lands, and for that instant nothing is in flight.
 */
const BUSY_HOLD_MS = 250;

/** A counter of submissions in flight, with a short memory of the last burst. */
export function createIngestLoad(now: () => number = () => performance.now()): IngestLoad {
  let inFlight = 0;
  let busyUntil = -Infinity;
  return {
    enter() {
      if (++inFlight >= BUSY_IN_FLIGHT) busyUntil = now() + BUSY_HOLD_MS;
    },
    leave() {
      inFlight--;
    },
    busy: () => inFlight >= BUSY_IN_FLIGHT || now() < busyUntil,
  };
}
