/**
 * The pace of each destination: how many deliveries it may have in flight, and when
 * the next one may start. The dispatcher consults it (dispatcher.ts); the engine tells
 * it what each attempt came to (signalOf). No KV here: what other processes learnt
 * comes in through merge().
 *
 * - Concurrency adapts as TCP's congestion window and Envoy's adaptive concurrency treat
 *   an upstream, judged by what the receiver did only: its latency is the connector's time
 *   less what this process kept the answer waiting (its busy event loop, its own session
 *   limits: attempt.ts, loop_stall.ts), so a flood of ingestion on the one thread never
 *   reads as a slow receiver. It starts at `initial`, doubles per round trip while the
 *   receiver answers 2xx without its latency rising (slow start), then grows by one per
 *   round trip; latency past twice the lowest seen (plus LATENCY_SLACK_MS) takes a tenth
 *   off, once per round trip; a time-out (unless this process's own waits took most of
 *   it), a connection error or a 5xx (a plain `503` from a receiver at capacity included)
 *   halves it, as TCP halves its window on a loss: once per window, so an attempt that
 *   started before the last cut (it was sent under the larger limit) cuts nothing more. It
 *   never grows unless the destination uses at least half of it, and never passes `max`,
 *   nor what RATE_CEILING deliveries a second need at the lowest latency seen. Every
 *   PROBE_EVERY_MS, and when latency rises (at most every PROBE_GAP_MS), the lowest
 *   latency is measured afresh at a concurrency of PROBE_CONCURRENCY: a receiver slower
 *   whatever the load is then taken as it is (and its concurrency found again by
 *   doubling), one slower with load is cut back. Between two measures the lowest latency
 *   drifts up slowly (MIN_LATENCY_DRIFT_MS).
 * - A refusal (HTTP 429, a 503 with Retry-After, an SMTP relay's 421/451, or a
 *   connector's own reading of a service's answer: PaceHint) holds the destination's
 *   whole queue and halves its concurrency: for Retry-After when given, else 1 s; refusals in a row (no delivery
 *   between) hold at least 1 s doubling each time, up to MAX_DEFAULT_HOLD_MS. After a
 *   refusal for rate (all but a 503, which says the receiver is down for a while),
 *   starts are spaced to a rate: 0.9 × what the receiver accepted over the
 *   last RATE_WINDOW_MS, rising by 0.01/s per delivery (1 % a second while it is
 *   used), forgotten after RATE_FORGET_MS without a refusal.
 * - A quota that runs out (remaining 0 with a reset time, on any answer) holds the
 *   destination until the reset, without a refusal.
 * - Processes sharing a KV pace each receiver together (merge, fed every second by
 *   store/process_shares.ts through the engine): with P processes delivering to a
 *   destination, each grows by 1/P of what one would and keeps under 1/P of its cap
 *   and ceiling, so together they grow as one; a congestion cut, a hold or a rate one
 *   process learns is taken up by the others within a second of being shared.
 *
 * @module
 */
import type { PaceHint } from "../connectors/types.ts";
import type { PaceShare } from "../store/process_shares.ts";
import type { AttemptResult } from "./attempt.ts";
import { MAX_RETRY_AFTER_MS } from "./retry.ts";

/** What one attempt tells about its destination's pace. */
export type PaceSignal =
  /** Delivered, with the time the attempt took. */
  | { kind: "delivered"; latencyMs: number; hint?: PaceHint }
  /** Time-out, connection error, 5xx: the receiver cannot take this much; how long it took. */
  | { kind: "overloaded"; latencyMs: number }
  /** Refused for rate: hold, then pace. */
  | { kind: "limited"; hint: PaceHint }
  /** Nothing about capacity (a refusal of one submission, a config error, shutdown). */
  | { kind: "neutral" };

/** Settings of the pace. */
export interface PaceOptions {
  /** Deliveries in flight a destination starts with. */
  initial: number;
  /** Deliveries in flight to one destination at most (DESTINATION_MAX_CONCURRENCY). */
  max: number;
  now?: () => number;
  /** A destination not paced here yet starts a delivery (the engine shares paces at once). */
  onFirstUse?: () => void;
}

/** One destination's pace as shown to operators. */
export interface PaceView {
  /** Deliveries it may have in flight now. */
  concurrency: number;
  /** Epoch ms until which nothing is sent to it (a Retry-After, a quota), or null. */
  heldUntil: number | null;
  /** Starts per second it is kept to since it refused for rate, or null. */
  ratePerSecond: number | null;
}

/** The pace of every destination this process delivers to. */
export interface Pace {
  /** Deliveries the destination may have in flight now. */
  limit(destinationId: string): number;
  /** Ms until the destination may start a delivery (held, or spaced by its rate); 0: now. */
  waitMs(destinationId: string): number;
  /** A delivery to the destination starts. */
  started(destinationId: string): void;
  /**
   * What an attempt came to; `inFlight` is how many deliveries to the destination were
   * in flight as it ended, itself included.
   */
  record(destinationId: string, signal: PaceSignal, inFlight: number): void;
  /** One destination's pace (the starting values for one not seen yet). */
  view(destinationId: string): PaceView;
  /** The destinations paced here and their paces. */
  views(): IterableIterator<[string, PaceView]>;
  /** Processes delivering to the destination, this one included, as last shared. */
  senders(destinationId: string): number;
  /** What this process keeps to the destinations it delivered to lately, for the others. */
  shares(): Map<string, PaceShare>;
  /** Takes up the other processes' shares (by destination id): their number, holds, rates, cuts. */
  merge(others: Map<string, PaceShare[]>): void;
}

/** Latency rise that is still not congestion (loopback's and a loaded machine's jitter). */
export const LATENCY_SLACK_MS = 50;
/** Weight of a new sample in the smoothed latency. */
const SMOOTHING = 0.1;
/** How slowly the lowest latency seen drifts up towards what is measured: its time constant. */
const MIN_LATENCY_DRIFT_MS = 60_000;
/**
 * How often the lowest latency is measured afresh, with the destination held to
 * PROBE_CONCURRENCY until PROBE_SAMPLES deliveries started under it have answered (as
 * Envoy's adaptive concurrency recalculates its minimum RTT). Between two, the lowest
 * latency drifts up towards what is measured, which follows a busy event loop; without
 * the fresh measure, a receiver that slows with load would let concurrency ratchet up.
 */
export const PROBE_EVERY_MS = 30_000;
/** Rising latency asks for a fresh measure too, at most this often. */
const PROBE_GAP_MS = 5_000;
const PROBE_CONCURRENCY = 2;
const PROBE_SAMPLES = 5;
/** Multiplicative decreases: on rising latency, and on time-outs and errors. */
const LATENCY_CUT = 0.9;
const OVERLOAD_CUT = 0.5;
/** The first hold after a refusal without Retry-After, doubled per refusal in a row... */
const DEFAULT_HOLD_MS = 1000;
/** ...up to this. */
export const MAX_DEFAULT_HOLD_MS = 5 * 60_000;
/** The accepted rate is measured over this window before a refusal. */
const RATE_WINDOW_MS = 2000;
/** Deliveries remembered for that measure, per destination. */
const RATE_SAMPLES = 64;
/** Share of the measured rate kept to after a refusal. */
const RATE_BACKOFF = 0.9;
/** Rate increase per delivery (so 1 % a second while deliveries go at the rate). */
const RATE_STEP = 0.01;
/** Lowest rate kept to: one start every ten seconds. */
const MIN_RATE = 0.1;
/** The rate asked for when nothing was accepted before the first refusal (chat services allow about this). */
const FIRST_RATE = 1;
/** A rate with no refusal for this long is dropped. */
export const RATE_FORGET_MS = 10 * 60_000;
/**
 * Deliveries a second one destination is given room for: more than a process delivers to
 * one receiver (docs/design.md, "Figures behind the code's limits"). Concurrency grows no
 * further than this rate needs at the destination's lowest latency (Little's law), and
 * no lower than MIN_CEILING: more in flight to a receiver that answers at once buys no
 * speed, only memory, while one answering in 100 ms needs 150 in flight for it.
 */
export const RATE_CEILING = 1500;
/** Deliveries in flight a destination may always grow to (two rounds of slow start). */
export const MIN_CEILING = 32;
/** Destinations whose pace is remembered at most (least recently used go first). */
const MAX_TRACKED = 20_000;
/** A destination is shared with the other processes while it was used this recently. */
export const SHARE_ACTIVE_MS = 10_000;

interface DestinationPace {
  limit: number;
  slowStart: boolean;
  /** Lowest latency seen (drifting up slowly) and the smoothed latency, ms. */
  minLatency: number | null;
  latency: number | null;
  lastCutAt: number;
  /** When the last delivery was sampled. */
  sampledAt: number;
  /** When the lowest latency is next measured afresh (0: not yet due); since when it is. */
  nextProbeAt: number;
  /** When the last fresh measure ended. */
  probedAt: number;
  probe: { startedAt: number; lowest: number; samples: number } | null;
  heldUntil: number;
  /** Refusals for rate since the last delivery. */
  refusals: number;
  rate: number | null;
  lastRefusalAt: number;
  /** Earliest start under the rate. */
  nextStartAt: number;
  /** Times of the last deliveries (a ring), for the rate accepted before a refusal. */
  deliveredAt: number[];
  ring: number;
  /** Other processes delivering to it (merge), and the latest of their congestion cuts taken up. */
  peers: number;
  peersCongestedAt: number;
  /** Its own last cut for congestion (an overload or a refusal), and when it was last used. */
  congestedAt: number;
  usedAt: number;
}

/**
 * What an attempt's result tells the pace; `elapsedMs` is how long the attempt took.
 * Latency is the receiver's time (result.timing, attempt.ts), not the attempt's: time the
 * answer waited on this process's busy event loop or its own limits is not the
 * receiver's. A time-out or connection error mostly spent waiting on this process (a
 * blocked thread let the time-out pass) says nothing of the receiver either.
 */
export function signalOf(result: AttemptResult, elapsedMs: number): PaceSignal {
  if ("held" in result || "deferred" in result) return { kind: "neutral" };
  const latencyMs = result.timing?.receiverMs ?? elapsedMs;
  if (result.delivered) return { kind: "delivered", latencyMs, hint: result.receipt.pace };
  const { failure } = result;
  if (failure.pace?.limited) return { kind: "limited", hint: failure.pace };
  if (failure.permanent || failure.blame === "submission" || result.unexpected) {
    return { kind: "neutral" };
  }
  // Time-outs and connection errors have no status; 408 and 5xx are the receiver's strain.
  const status = failure.statusCode;
  if (status === undefined && result.timing && result.timing.ownMs > result.timing.receiverMs) {
    return { kind: "neutral" };
  }
  // An overload's whole time dates its start against the last decrease (record()).
  return status === undefined || status === 408 || status >= 500
    ? { kind: "overloaded", latencyMs: elapsedMs }
    : { kind: "neutral" };
}

/** The pace of every destination, under `options`. */
export function createPace(options: PaceOptions): Pace {
  const { initial, max } = options;
  const clock = options.now ?? Date.now;
  const paces = new Map<string, DestinationPace>();

  function fresh(): DestinationPace {
    return {
      limit: Math.min(initial, max),
      slowStart: true,
      minLatency: null,
      latency: null,
      lastCutAt: 0,
      sampledAt: 0,
      nextProbeAt: 0,
      probedAt: 0,
      probe: null,
      heldUntil: 0,
      refusals: 0,
      rate: null,
      lastRefusalAt: 0,
      nextStartAt: 0,
      deliveredAt: [],
      ring: 0,
      peers: 0,
      peersCongestedAt: 0,
      congestedAt: 0,
      usedAt: 0,
    };
  }

  /** What one destination may have in flight at most, by its lowest latency (Little's law). */
  function ceilingOf(lowestMs: number | null): number {
    if (lowestMs === null) return max;
    return Math.max(MIN_CEILING, Math.ceil((lowestMs * RATE_CEILING) / 1000));
  }

  /** This process's part of what one destination may have: its cap split among the processes. */
  function part(pace: DestinationPace, value: number): number {
    return Math.max(1, value / (1 + pace.peers));
  }

  /** A destination's pace, moved to the back of the least-recently-used order. */
  function touch(destinationId: string): DestinationPace {
    const pace = paces.get(destinationId) ?? fresh();
    paces.delete(destinationId);
    paces.set(destinationId, pace);
    if (paces.size > MAX_TRACKED) paces.delete(paces.keys().next().value!);
    return pace;
  }

  /** Multiplies the destination's concurrency by `factor` (< 1) and ends its slow start. */
  function lowerLimit(pace: DestinationPace, factor: number, now: number) {
    pace.limit = Math.max(1, pace.limit * factor);
    pace.slowStart = false;
    pace.lastCutAt = now;
  }

  function delivered(pace: DestinationPace, latencyMs: number, inFlight: number, now: number) {
    pace.refusals = 0;
    pace.deliveredAt[pace.ring] = now;
    pace.ring = (pace.ring + 1) % RATE_SAMPLES;
    if (pace.rate !== null) {
      if (now - pace.lastRefusalAt > RATE_FORGET_MS) pace.rate = null;
      else pace.rate += RATE_STEP;
    }
    if (probing(pace, latencyMs, now)) return;
    const lowest = pace.minLatency === null ? latencyMs : Math.min(
      latencyMs,
      pace.minLatency +
        (latencyMs - pace.minLatency) * Math.min(1, (now - pace.sampledAt) / MIN_LATENCY_DRIFT_MS),
    );
    pace.sampledAt = now;
    pace.minLatency = lowest;
    pace.latency = pace.latency === null
      ? latencyMs
      : pace.latency + (latencyMs - pace.latency) * SMOOTHING;
    const threshold = 2 * lowest + LATENCY_SLACK_MS;
    // Slow start stops at the first slow answer; after it, the smoothed latency decides.
    const rising = pace.slowStart ? latencyMs > threshold : pace.latency > threshold;
    if (rising) {
      // Whether the receiver got slower whatever the load, or slower with it, a fresh
      // measure at low concurrency tells (at most every PROBE_GAP_MS); then cut.
      if (now - pace.probedAt >= PROBE_GAP_MS) startProbe(pace, now);
      else if (now - pace.lastCutAt >= pace.latency) lowerLimit(pace, LATENCY_CUT, now);
      return;
    }
    // Growth needs evidence: a destination using less than half its limit proves nothing.
    if (inFlight < pace.limit / 2) return;
    const ceiling = ceilingOf(lowest);
    // Shared with P processes: slow start as one (each 1/P), after it each grows by 1/P²
    // a round trip, so that one process's cut (of its own part, 1/P of the whole) is not
    // undone before the cut of all (through merge, within a second).
    const shared = 1 + pace.peers;
    const step = pace.slowStart ? 1 / shared : 1 / pace.limit / shared ** 2;
    pace.limit = Math.max(
      pace.limit,
      Math.min(part(pace, max), part(pace, ceiling), pace.limit + step),
    );
  }

  /**
   * Measures the lowest latency afresh when due (see PROBE_EVERY_MS); true while it does,
   * when the sample is the measure's and concurrency is left as it is.
   */
  function probing(pace: DestinationPace, latencyMs: number, now: number): boolean {
    if (pace.nextProbeAt === 0) pace.nextProbeAt = now + PROBE_EVERY_MS;
    const { probe } = pace;
    if (probe === null) {
      if (now < pace.nextProbeAt) return false;
      startProbe(pace, now);
      return true;
    }
    // Only deliveries started under the probe's concurrency count.
    if (now - latencyMs >= probe.startedAt) {
      probe.lowest = Math.min(probe.lowest, latencyMs);
      probe.samples++;
    }
    if (probe.samples < PROBE_SAMPLES) return true;
    // A receiver now slower whatever the load: what was learnt of it no longer holds,
    // so concurrency finds its level again as at the start (doubling per round trip).
    if (pace.minLatency !== null && probe.lowest > 2 * pace.minLatency + LATENCY_SLACK_MS) {
      pace.slowStart = true;
    }
    pace.minLatency = probe.lowest;
    pace.probe = null;
    pace.probedAt = now;
    // Spread a little, so that destinations started together do not probe together.
    pace.nextProbeAt = now + PROBE_EVERY_MS * (0.9 + Math.random() * 0.2);
    return true;
  }

  function startProbe(pace: DestinationPace, now: number) {
    pace.probe = { startedAt: now, lowest: Infinity, samples: 0 };
  }

  /** The rate the receiver accepted over the last RATE_WINDOW_MS, or null when nothing was. */
  function acceptedRate(pace: DestinationPace, now: number): number | null {
    const recent = pace.deliveredAt.filter((at) => now - at <= RATE_WINDOW_MS);
    if (recent.length === 0) return null;
    // Since the oldest of them, over a second at least (a burst's first answers come at once).
    const span = Math.max(1000, now - Math.min(...recent));
    return recent.length / (span / 1000);
  }

  function limited(pace: DestinationPace, hint: PaceHint, now: number) {
    const asked = hint.retryAfterMs ?? hint.resetAfterMs;
    // Attempts started before the hold come back refused too: one refusal per hold counts.
    if (now < pace.heldUntil) {
      if (asked !== undefined) pace.heldUntil = Math.max(pace.heldUntil, now + asked);
      return;
    }
    pace.refusals++;
    // Refusals in a row hold longer each time, whatever Retry-After says (a receiver
    // answering "Retry-After: 0" again and again is not hammered).
    const escalated = Math.min(MAX_DEFAULT_HOLD_MS, DEFAULT_HOLD_MS * 2 ** (pace.refusals - 1));
    const hold = asked === undefined
      ? escalated
      : Math.max(asked, pace.refusals > 1 ? escalated : 0);
    pace.heldUntil = now + Math.min(hold, MAX_RETRY_AFTER_MS);
    // A receiver down for a while says nothing of the rate it takes: only the hold applies.
    if (!hint.unavailable) {
      // Nothing accepted lately: the rate it was kept to (or a first guess, its part of
      // it when other processes deliver there too) stands.
      const accepted = acceptedRate(pace, now);
      pace.rate = Math.max(
        MIN_RATE,
        accepted !== null ? accepted * RATE_BACKOFF : pace.rate ?? FIRST_RATE / (1 + pace.peers),
      );
      pace.lastRefusalAt = now;
      pace.nextStartAt = pace.heldUntil;
    }
    lowerLimit(pace, OVERLOAD_CUT, now);
    pace.congestedAt = now;
  }

  /** Takes up what the other processes delivering to the destination learnt. */
  function mergeOne(pace: DestinationPace, others: PaceShare[], now: number) {
    pace.peers = others.length;
    // Fewer processes' worth of room than it had: keep to the new part at once.
    pace.limit = Math.min(pace.limit, part(pace, max), part(pace, ceilingOf(pace.minLatency)));
    let congestedAt = 0;
    let rates = 0, rated = 0;
    for (const other of others) {
      pace.heldUntil = Math.max(pace.heldUntil, other.heldUntil);
      congestedAt = Math.max(congestedAt, other.congestedAt);
      if (other.rate !== null) (rates += other.rate), rated++;
    }
    // A cut elsewhere since this process's own: the receiver was over what all sent together.
    if (congestedAt > pace.peersCongestedAt && congestedAt > pace.lastCutAt) {
      lowerLimit(pace, OVERLOAD_CUT, now);
    }
    pace.peersCongestedAt = Math.max(pace.peersCongestedAt, congestedAt);
    // Refused for rate elsewhere: keep to what each of those processes keeps to.
    if (rated > 0 && pace.rate === null) {
      pace.rate = Math.max(MIN_RATE, rates / rated);
      pace.lastRefusalAt = now;
      pace.nextStartAt = Math.max(pace.nextStartAt, pace.heldUntil, now);
    }
  }

  return {
    limit(destinationId) {
      const pace = paces.get(destinationId);
      if (pace === undefined) return Math.min(initial, max);
      const limit = Math.floor(pace.limit);
      return pace.probe === null ? limit : Math.min(PROBE_CONCURRENCY, limit);
    },
    waitMs(destinationId) {
      const pace = paces.get(destinationId);
      if (pace === undefined) return 0;
      const now = clock();
      return Math.max(0, pace.heldUntil - now, pace.rate === null ? 0 : pace.nextStartAt - now);
    },
    started(destinationId) {
      let pace = paces.get(destinationId);
      if (pace === undefined) {
        pace = touch(destinationId);
        options.onFirstUse?.();
      }
      const now = clock();
      pace.usedAt = now;
      if (pace.rate === null) return;
      pace.nextStartAt = Math.max(pace.nextStartAt, now) + 1000 / pace.rate;
    },
    record(destinationId, signal, inFlight) {
      if (signal.kind === "neutral") return;
      const now = clock();
      const pace = touch(destinationId);
      pace.usedAt = now;
      if (signal.kind === "limited") return limited(pace, signal.hint, now);
      if (signal.kind === "overloaded") {
        // Sent under the limit before the last cut: that cut already answered it (the
        // attempts in flight together fail together).
        if (now - signal.latencyMs >= pace.lastCutAt) {
          lowerLimit(pace, OVERLOAD_CUT, now);
          pace.congestedAt = now;
        }
        return;
      }
      delivered(pace, signal.latencyMs, inFlight, now);
      const { hint } = signal;
      if (hint?.remaining === 0 && hint.resetAfterMs !== undefined) {
        pace.heldUntil = Math.max(
          pace.heldUntil,
          now + Math.min(hint.resetAfterMs, MAX_RETRY_AFTER_MS),
        );
      }
    },
    view(destinationId) {
      return viewOf(paces.get(destinationId) ?? fresh(), clock());
    },
    *views() {
      const now = clock();
      for (const [id, pace] of paces) yield [id, viewOf(pace, now)];
    },
    senders: (destinationId) => 1 + (paces.get(destinationId)?.peers ?? 0),
    shares() {
      const now = clock();
      const shares = new Map<string, PaceShare>();
      for (const [id, pace] of paces) {
        if (now - pace.usedAt > SHARE_ACTIVE_MS) continue;
        shares.set(id, {
          limit: pace.limit,
          heldUntil: pace.heldUntil > now ? pace.heldUntil : 0,
          congestedAt: pace.congestedAt,
          rate: pace.rate,
        });
      }
      return shares;
    },
    merge(others) {
      const now = clock();
      for (const [id, pace] of paces) mergeOne(pace, others.get(id) ?? [], now);
      // A destination delivered to elsewhere and not yet here: its part known before its first start.
      for (const [id, list] of others) {
        if (paces.has(id)) continue;
        const pace = touch(id);
        mergeOne(pace, list, now);
        pace.limit = Math.min(pace.limit, part(pace, Math.min(initial, max)));
      }
    },
  };

  function viewOf(pace: DestinationPace, now: number): PaceView {
    return {
      concurrency: Math.floor(pace.limit),
      heldUntil: pace.heldUntil > now ? pace.heldUntil : null,
      ratePerSecond: pace.rate === null ? null : Math.round(pace.rate * 100) / 100,
    };
  }
}
