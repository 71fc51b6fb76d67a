/**
 * The dispatcher: which woken job runs next, and when. It keeps the jobs waiting for a
 * delivery slot in this process, bounds how many run at once (the slots, a share per
 * organization, half of that per destination, the burst pause of an organization) and
 * hands freed slots round-robin between organizations, then between each
 * organization's destinations, so one tenant's hanging destinations or flooded forms
 * never hold up another tenant. Within those shares each destination runs at its own
 * pace (pace.ts: how many in flight, held after a refusal for rate, spaced to a rate),
 * which the dispatcher consults before starting a job and tells what each attempt came
 * to. It counts the jobs it holds per organization: that is the backlog ingestion is
 * bounded by. It knows nothing of KV or connectors: it is handed job refs and a
 * function that runs one.
 *
 * @module
 */
import Denque from "denque";
import type { JobRef } from "../store/job_record.ts";
import type { JobKeyParts } from "../store/keys.ts";
import type { Pace, PaceSignal } from "./pace.ts";

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
   * How long acceptance for an organization has been saturated (ms), null when it is
   * not. Acceptance comes first for a short while: for the first BURST_PAUSE_MS of such
   * a burst none of that organization's deliveries start, after that all may, so a
   * burst is answered fast and a sustained flood never slows delivery down.
   */
  burstMs?: (orgId: string) => number | null;
  /**
   * An organization's backlog (jobs waiting or in progress here) from which its burst
   * no longer holds its deliveries back: near the backlog bound they run, so that room
   * frees up and the burst is absorbed rather than refused (default: no limit).
   */
  pauseBelow?: number;
  /** A job left the backlog (its run ended): admission may have room again. */
  onLeft?(): void;
  /**
   * Each destination's pace, within its share; without it a destination may use all of
   * its share at once.
   */
  pace?: Pace;
  /** At most this many in flight on a lane (a destination), below its share and pace. */
  laneCap?: (destinationId: string) => number;
  /**
   * Runs one job. `release` gives the slot back, with what the attempt tells about its
   * destination's pace (recording the result happens after, so the KV's commit cycle
   * does not hold a slot); the job counts as in progress until the promise settles.
   */
  run(ref: JobRef, release: (signal?: PaceSignal) => void): Promise<void>;
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
  /** Deliveries running to one destination. */
  running(destinationId: string): number;
  /** Jobs waiting or in progress here: all of them, and those of one organization. */
  backlog(orgId: string): { total: number; org: number };
  /** Starts nothing more and waits for the runs under way. */
  close(): Promise<void>;
}

/**
 * Jobs that gave their slot back and are still recording their result, at most, before
 * new ones wait: the KV's commit cycle, not the slots, bounds how many results wait to be
 * written. Not a share of the slots, which are sized for receivers that take their time:
 * an instant receiver under a flood would keep thousands of jobs and their envelopes in
 * memory. Enough that the results waiting for the commit under way and the next leave no
 * slot idle (how 256 was chosen: docs/design.md).
 */
export const MAX_RECORDING = 256;
/**
 * How long a burst of acceptance on an organization's forms holds its new deliveries
 * back: the burst's visitors get their answers first, its deliveries follow. After
 * that they run as usual whether the burst goes on or not: a sustained flood must not
 * starve delivery (the backlog bound limits what it can add).
 */
export const BURST_PAUSE_MS = 10_000;
/** How often held-back deliveries look again whether the burst is over. */
const BURST_RECHECK_MS = 100;

/** Adds `delta` to a count in a map, dropping counts that reach zero. */
function count(counts: Map<string, number>, key: string, delta: number) {
  const value = (counts.get(key) ?? 0) + delta;
  if (value === 0) counts.delete(key);
  else counts.set(key, value);
}

/**
 * A set of jobs, grouped by submission: each submission's destination ids in one array,
 * which takes less heap than a string key a job ("submission/destination"; see
 * docs/design.md), and a raised backlog bound holds 100 000 jobs and more.
 */
function createJobSet() {
  const bySubmission = new Map<string, string[]>();
  let size = 0;
  return {
    get size() {
      return size;
    },
    has(ref: JobKeyParts): boolean {
      return bySubmission.get(ref.submissionId)?.includes(ref.destinationId) ?? false;
    },
    /** Adds a job; false when it was there already. */
    add(ref: JobKeyParts): boolean {
      const ids = bySubmission.get(ref.submissionId) ?? [];
      if (ids.includes(ref.destinationId)) return false;
      // A new array each time: one grown by push() keeps room for 16 more ids.
      bySubmission.set(ref.submissionId, [...ids, ref.destinationId]);
      size++;
      return true;
    },
    delete(ref: JobKeyParts) {
      const ids = bySubmission.get(ref.submissionId);
      if (ids === undefined || !ids.includes(ref.destinationId)) return;
      if (ids.length === 1) bySubmission.delete(ref.submissionId);
      else bySubmission.set(ref.submissionId, ids.filter((id) => id !== ref.destinationId));
      size--;
    },
  };
}

/** A dispatcher over `options.run`. */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  const { concurrency, maxWaiting, orgShare, pace } = options;
  // Waiting jobs by organization, then by destination. Both maps are rings: an
  // organization (a destination) that was served moves to the back, so freed slots go
  // round-robin, never back to whoever is first in line. A destination's line is a
  // deque: an array's shift() copies the whole array once it holds more than about
  // 16 000 jobs, which a raised backlog bound allows.
  const waiting = new Map<string, Map<string, Denque<JobRef>>>();
  // Slots held per destination and per organization.
  const running = new Map<string, number>();
  const runningByOrg = new Map<string, number>();
  const known = createJobSet();
  // Jobs waiting or in progress per organization (the backlog; `known` holds them all).
  const knownByOrg = new Map<string, number>();
  const pauseBelow = options.pauseBelow ?? Infinity;
  let recheck: ReturnType<typeof setTimeout> | null = null;
  let recheckAt = Infinity;
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
      if (!known.add(ref)) continue;
      count(knownByOrg, ref.orgId, 1);
      let destinations = waiting.get(ref.orgId);
      if (!destinations) waiting.set(ref.orgId, destinations = new Map());
      // Only what a run needs is kept: a woken job may be a whole record.
      const { submittedAt, submissionId, destinationId, orgId } = ref;
      const slim = { submittedAt, submissionId, destinationId, orgId };
      const queue = destinations.get(ref.destinationId);
      if (queue) queue.push(slim);
      else destinations.set(ref.destinationId, new Denque([slim]));
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
    let paused = false;
    // The soonest a destination held back by its pace may start.
    let soonest = Infinity;
    // An organization holds at most its share of the slots, and a destination at most
    // half of its organization's: hanging destinations never take every slot, neither
    // from other tenants nor from their own tenant's other destinations.
    const perOrg = Math.max(1, Math.floor(concurrency * orgShare));
    const perDestination = Math.max(1, Math.floor(perOrg / 2));
    while (
      !closed && started && active < concurrency && recording - active < MAX_RECORDING &&
      waitingCount > 0
    ) {
      started = false;
      // One job per organization and round, in ring order (a snapshot: served ones move back).
      for (const orgId of [...waiting.keys()]) {
        if (active >= concurrency || recording - active >= MAX_RECORDING) break;
        if ((runningByOrg.get(orgId) ?? 0) >= perOrg) continue;
        if (inBurstPause(orgId)) {
          paused = true;
          continue;
        }
        const next = takeNext(orgId, perDestination);
        soonest = Math.min(soonest, next.waitMs);
        const { ref } = next;
        if (ref === null) continue;
        start(ref);
        started = true;
      }
    }
    if (paused) soonest = Math.min(soonest, BURST_RECHECK_MS);
    if (soonest < Infinity) pumpAgainIn(soonest);
  }

  /** Pumps again after `ms` (one timer, for the soonest of the times asked). */
  function pumpAgainIn(ms: number) {
    const at = Date.now() + ms;
    if (closed || at >= recheckAt) return;
    if (recheck !== null) clearTimeout(recheck);
    recheckAt = at;
    recheck = setTimeout(() => {
      recheck = null;
      recheckAt = Infinity;
      pump();
    }, ms);
  }

  /** Whether an organization's deliveries wait for the first moments of its burst to pass. */
  function inBurstPause(orgId: string): boolean {
    if ((knownByOrg.get(orgId) ?? 0) >= pauseBelow) return false;
    const burstMs = options.burstMs?.(orgId) ?? null;
    return burstMs !== null && burstMs < BURST_PAUSE_MS;
  }

  /**
   * Takes the next job of an organization from its first destination below its cap
   * (its share and its pace) and free to start, and moves that destination and the
   * organization to the back of their rings; null when there is none. `waitMs`: the
   * soonest a destination held back by its pace may start (Infinity: none is).
   */
  function takeNext(orgId: string, perDestination: number): { ref: JobRef | null; waitMs: number } {
    const destinations = waiting.get(orgId)!;
    let waitMs = Infinity;
    for (const [destinationId, queue] of destinations) {
      const cap = Math.min(
        perDestination,
        pace?.limit(destinationId) ?? Infinity,
        options.laneCap?.(destinationId) ?? Infinity,
      );
      if ((running.get(destinationId) ?? 0) >= cap) continue;
      const wait = pace?.waitMs(destinationId) ?? 0;
      if (wait > 0) {
        waitMs = Math.min(waitMs, wait);
        continue;
      }
      pace?.started(destinationId);
      const ref = queue.shift()!;
      destinations.delete(destinationId);
      if (queue.length > 0) destinations.set(destinationId, queue);
      waiting.delete(orgId);
      if (destinations.size > 0) waiting.set(orgId, destinations);
      waitingCount--;
      return { ref, waitMs };
    }
    return { ref: null, waitMs };
  }

  function start(ref: JobRef) {
    active++;
    recording++;
    count(running, ref.destinationId, 1);
    count(runningByOrg, ref.orgId, 1);
    let released = false;
    const release = (signal?: PaceSignal) => {
      if (released) return;
      released = true;
      if (signal) pace?.record(ref.destinationId, signal, running.get(ref.destinationId) ?? 0);
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
        known.delete(ref);
        count(knownByOrg, ref.orgId, -1);
        options.onLeft?.();
        if (active === 0 && recording === 0 && idle) idle.resolve();
        pump();
      });
  }

  return {
    wake,
    has: known.has,
    full() {
      if (waitingCount < maxWaiting) return false;
      overflowed = true;
      return true;
    },
    noteBacklog() {
      overflowed = true;
    },
    stats: () => ({ active, waiting: waitingCount }),
    running: (destinationId) => running.get(destinationId) ?? 0,
    backlog: (orgId) => ({ total: known.size, org: knownByOrg.get(orgId) ?? 0 }),
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
