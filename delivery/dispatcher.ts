/**
 * The dispatcher: which woken job runs next, and when. It keeps the jobs waiting for a
 * delivery slot in this process, bounds how many run at once (the slots, the burst
 * gate, a share per organization, half of that per destination) and hands freed
 * slots round-robin between organizations, then between each organization's
 * destinations, so one tenant's hanging destinations never hold up another tenant. It
 * knows nothing of KV or connectors: it is handed job refs and a function that runs one.
 *
 * @module
 */
import { type JobRef, refKey } from "../store/job_record.ts";

/** What the dispatcher needs. */
export interface DispatcherOptions {
  /** Deliveries running at once at most. */
  concurrency: number;
  /**
   * Share of the slots one organization may hold (0 < share <= 1, at least one slot);
   * 1 leaves organizations uncapped.
   */
  orgShare: number;
  /** Jobs waiting for a slot in memory at most; the rest wait in KV. */
  maxWaiting: number;
  /**
   * How long this process has been saturated with accepting submissions (ms), null
   * when it is not. Acceptance comes first: for the first BURST_PAUSE_MS of such a
   * burst no new delivery starts, after that at most MIN_CONCURRENCY, so the burst is
   * answered fast and its deliveries follow as soon as it eases.
   */
  burstMs?: () => number | null;
  /**
   * Runs one job. `release` gives the slot back (recording the result happens after,
   * so the KV's commit cycle does not hold a slot); the job counts as in progress until
   * the promise settles.
   */
  run(ref: JobRef, release: () => void): Promise<void>;
  /** A run rejected. */
  onError(ref: JobRef, error: unknown): void;
  /** The waiting list overflowed into KV and has room again: time to sweep the rest in. */
  onRoom(): void;
}

/** Jobs waiting for slots and the slots they run in. */
export interface Dispatcher {
  /** Adds jobs to the waiting list (those already woken are passed over) and starts what may run. */
  wake(refs: JobRef[]): void;
  /** Whether a job is waiting or running here. */
  has(ref: JobRef): boolean;
  /**
   * Whether the waiting list is full; when it is, the jobs turned away wait in KV and
   * onRoom is called once there is room again.
   */
  full(): boolean;
  /** Notes that more jobs wait in KV than were woken, so that onRoom follows when there is room. */
  noteBacklog(): void;
  /** Deliveries running and jobs waiting for a slot. */
  stats(): { active: number; waiting: number };
  /** Starts nothing more and waits for the runs under way. */
  close(): Promise<void>;
}

/** Jobs recording their result, per delivery slot, before new ones wait. */
const MAX_RECORDING_PER_SLOT = 2;
/** Deliveries that keep going during a burst of acceptance once it outlasts BURST_PAUSE_MS. */
const MIN_CONCURRENCY = 2;
/**
 * How long a burst of acceptance holds new deliveries back entirely: the burst's
 * visitors wait for their answers, its deliveries can follow it. A longer flood gets
 * MIN_CONCURRENCY deliveries anyway, so it never stops delivery for longer than this.
 */
export const BURST_PAUSE_MS = 30_000;
/** How often held-back deliveries look again whether the burst is over. */
const BURST_RECHECK_MS = 100;

/** Adds `delta` to a count in a map, dropping counts that reach zero. */
function count(counts: Map<string, number>, key: string, delta: number) {
  const value = (counts.get(key) ?? 0) + delta;
  if (value === 0) counts.delete(key);
  else counts.set(key, value);
}

/** A dispatcher over `options.run`. */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  const { concurrency, maxWaiting, orgShare } = options;
  // Waiting jobs by organization, then by destination. Both maps are rings: an
  // organization (a destination) that was served moves to the back, so freed slots go
  // round-robin, never back to whoever is first in line.
  const waiting = new Map<string, Map<string, JobRef[]>>();
  // Slots held per destination and per organization.
  const running = new Map<string, number>();
  const runningByOrg = new Map<string, number>();
  const known = new Set<string>();
  let recheck: ReturnType<typeof setTimeout> | null = null;
  // Slots held by jobs being claimed and delivered; `recording` counts every job in
  // progress, slot or not, and is bounded too.
  let active = 0;
  let recording = 0;
  let waitingCount = 0;
  let closed = false;
  let overflowed = false;
  let idle: PromiseWithResolvers<void> | null = null;

  function wake(refs: JobRef[]) {
    if (closed) return;
    for (const ref of refs) {
      // A backlog beyond this stays in KV only; the sweep brings it in as room frees up.
      if (waitingCount >= maxWaiting) {
        overflowed = true;
        break;
      }
      const key = refKey(ref);
      if (known.has(key)) continue;
      known.add(key);
      let destinations = waiting.get(ref.orgId);
      if (!destinations) waiting.set(ref.orgId, destinations = new Map());
      const queue = destinations.get(ref.destinationId);
      if (queue) queue.push(ref);
      else destinations.set(ref.destinationId, [ref]);
      waitingCount++;
    }
    pump();
  }

  function pump() {
    if (overflowed && waitingCount < maxWaiting / 2) {
      overflowed = false;
      options.onRoom();
    }
    let started = true;
    const limit = deliveryLimit();
    if (limit === 0 && waitingCount > 0 && recheck === null && !closed) {
      recheck = setTimeout(() => {
        recheck = null;
        pump();
      }, BURST_RECHECK_MS);
    }
    // An organization holds at most its share of the slots, and a destination at most
    // half of its organization's: hanging destinations never take every slot, neither
    // from other tenants nor from their own tenant's other destinations.
    const perOrg = Math.max(1, Math.floor(limit * orgShare));
    const perDestination = Math.max(1, Math.floor(perOrg / 2));
    const maxInProgress = MAX_RECORDING_PER_SLOT * concurrency;
    while (
      !closed && started && active < limit && recording < maxInProgress && waitingCount > 0
    ) {
      started = false;
      // One job per organization and round, in ring order (a snapshot: served ones move back).
      for (const orgId of [...waiting.keys()]) {
        if (active >= limit || recording >= maxInProgress) break;
        if ((runningByOrg.get(orgId) ?? 0) >= perOrg) continue;
        const ref = takeNext(orgId, perDestination);
        if (ref === null) continue;
        start(ref);
        started = true;
      }
    }
  }

  /**
   * Takes the next job of an organization from its first destination below the cap,
   * and moves that destination and the organization to the back of their rings; null
   * when every destination of the organization is at its cap.
   */
  function takeNext(orgId: string, perDestination: number): JobRef | null {
    const destinations = waiting.get(orgId)!;
    for (const [destinationId, queue] of destinations) {
      if ((running.get(destinationId) ?? 0) >= perDestination) continue;
      const ref = queue.shift()!;
      destinations.delete(destinationId);
      if (queue.length > 0) destinations.set(destinationId, queue);
      waiting.delete(orgId);
      if (destinations.size > 0) waiting.set(orgId, destinations);
      waitingCount--;
      return ref;
    }
    return null;
  }

  /** Deliveries that may run now: all slots, unless acceptance is in a burst. */
  function deliveryLimit(): number {
    const burstMs = options.burstMs?.() ?? null;
    if (burstMs === null) return concurrency;
    return burstMs < BURST_PAUSE_MS ? 0 : Math.min(MIN_CONCURRENCY, concurrency);
  }

  function start(ref: JobRef) {
    active++;
    recording++;
    count(running, ref.destinationId, 1);
    count(runningByOrg, ref.orgId, 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      active--;
      count(running, ref.destinationId, -1);
      count(runningByOrg, ref.orgId, -1);
      pump();
    };
    options.run(ref, release)
      .catch((error) => options.onError(ref, error))
      .finally(() => {
        release();
        recording--;
        known.delete(refKey(ref));
        if (active === 0 && recording === 0 && idle) idle.resolve();
        pump();
      });
  }

  return {
    wake,
    has: (ref) => known.has(refKey(ref)),
    full() {
      if (waitingCount < maxWaiting) return false;
      overflowed = true;
      return true;
    },
    noteBacklog() {
      overflowed = true;
    },
    stats: () => ({ active, waiting: waitingCount }),
    async close() {
      closed = true;
      if (recheck !== null) clearTimeout(recheck);
      if (active > 0 || recording > 0) {
        idle = Promise.withResolvers();
        await idle.promise;
      }
    },
  };
}
