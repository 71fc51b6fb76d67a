/**
 * Digests: one chat destination's deliveries go out one message at a time, no faster
 * than its service takes them, and the deliveries that wait meanwhile (a burst of
 * submissions) go out together as one message, "5 new submissions to Contact", up to
 * the service's limits. Each delivery still resolves or fails on its own (its own
 * outcome); they share the one answer. A `429` holds the destination for as long as the
 * service says, and the waiting deliveries join the next digest instead of going back
 * to the retry schedule, as long as they can wait (else they fail transient and are
 * retried). Per process, in memory: no KV; processes sharing a KV space their messages
 * by as many gaps as there are of them (DeliveryRequest.senders, from the shared pace),
 * and a 429 one of them gets holds them all (through the pace).
 * An idle line waits GATHER_MS before its first message, so that deliveries woken
 * together (a burst, or a digest sent again after its process was killed) go as one.
 *
 * @module
 */
import type { SubmissionEnvelope } from "../../submission.ts";
import { DeliveryError, type DeliveryReceipt, type DeliveryRequest } from "../types.ts";

/** How one service's messages are paced and joined. */
export interface DigestSpec {
  /** Most submissions in one message. */
  maxPerMessage: number;
  /** Least time between two messages to one destination (the service's documented pace). */
  minGapMs: number;
  /** Longest a delivery waits for its turn; past it, it fails transient (retried later). */
  maxWaitMs: number;
  /**
   * Sends one message of these envelopes with this config; throws DeliveryError. Its
   * `holdMs` is how long the service's quota says to wait before the next one.
   */
  send(
    envelopes: SubmissionEnvelope[],
    config: unknown,
    signal: AbortSignal,
  ): Promise<{ receipt: DeliveryReceipt; holdMs: number }>;
}

/** How long an idle line gathers the deliveries arriving together before its first message. */
const GATHER_MS = 20;
/** Destinations remembered before idle ones are forgotten. */
const MAX_LINES = 10_000;

interface Waiting {
  request: DeliveryRequest<unknown>;
  deadline: number;
  /** Since when it waits in the line (epoch ms): for its own wait, see ownWaitEnds. */
  queuedAt: number;
  resolve(receipt: DeliveryReceipt): void;
  reject(error: unknown): void;
}

interface Line {
  queue: Waiting[];
  /** Epoch ms before which nothing is sent. */
  notBefore: number;
  running: boolean;
}

/** Waits `ms` or until `signal` aborts; says which. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const done = (finished: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      resolve(finished);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * The time `waiting` spent in the line until `now` is formrelay's own wait (its spacing of
 * the service's messages, a burst gathered), not the service's: it goes to the request's
 * ownWait, which the pace leaves out of the receiver's latency (delivery/attempt.ts).
 * Without it every turn waited for read as a slow receiver, and a delivery that missed
 * its turn as an overloaded one, and the pace cut the destination's concurrency down to
 * one delivery in flight per process: one submission per message.
 */
function ownWaitEnds(waiting: Waiting, now: number): void {
  if (waiting.request.ownWait) waiting.request.ownWait.ms += Math.max(0, now - waiting.queuedAt);
  waiting.queuedAt = now;
}

/** Whose turn it is not yet, in words (the delivery is retried). */
function notInTime(waitedMs: number): DeliveryError {
  return new DeliveryError(
    `Waited ${Math.round(waitedMs / 1000)} s for the service's pace: tried again later`,
    { permanent: false, retryAfterMs: 1000 },
  );
}

/** A sender of digests for `spec`, with one line per destination. */
export function createDigestSender(spec: DigestSpec) {
  const lines = new Map<string, Line>();

  async function drain(key: string, line: Line): Promise<void> {
    line.running = true;
    try {
      while (line.queue.length > 0) {
        const signal = AbortSignal.any(line.queue.map((w) => w.request.signal));
        const waitMs = line.notBefore - Date.now();
        if (waitMs > 0 && !await pause(waitMs, signal)) {
          const cancelled = new DeliveryError("The attempt was cancelled", { permanent: false });
          for (const waiting of line.queue.splice(0)) {
            ownWaitEnds(waiting, Date.now());
            waiting.reject(cancelled);
          }
          break;
        }
        const now = Date.now();
        for (const late of line.queue.filter((w) => w.deadline < now)) {
          ownWaitEnds(late, now);
          late.reject(notInTime(spec.maxWaitMs));
        }
        line.queue = line.queue.filter((w) => w.deadline >= now);
        const batch = line.queue.splice(0, spec.maxPerMessage);
        if (batch.length === 0) break;
        await sendBatch(line, batch);
      }
    } finally {
      line.running = false;
      if (line.queue.length === 0 && line.notBefore <= Date.now()) lines.delete(key);
    }
  }

  async function sendBatch(line: Line, batch: Waiting[]): Promise<void> {
    const signal = AbortSignal.any(batch.map((w) => w.request.signal));
    const sentAt = Date.now();
    for (const waiting of batch) ownWaitEnds(waiting, sentAt);
    try {
      const envelopes = batch.map((w) => w.request.envelope);
      const { receipt, holdMs } = await spec.send(envelopes, batch[0].request.config, signal);
      const senders = Math.max(1, ...batch.map((w) => w.request.senders ?? 1));
      line.notBefore = Date.now() + Math.max(spec.minGapMs * senders, holdMs);
      const detail = batch.length > 1
        ? `Sent in a digest of ${batch.length} submissions`
        : receipt.detail;
      for (const waiting of batch) waiting.resolve({ ...receipt, detail });
    } catch (error) {
      const limited = error instanceof DeliveryError && error.statusCode === 429;
      if (!limited) {
        for (const waiting of batch) waiting.reject(error);
        return;
      }
      // Held as the service says; those who can wait that long join the next message.
      line.notBefore = Date.now() + Math.max(error.retryAfterMs ?? 1000, spec.minGapMs);
      const keep = batch.filter((w) => w.deadline >= line.notBefore);
      for (const waiting of keep) waiting.queuedAt = Date.now();
      for (const waiting of batch) if (!keep.includes(waiting)) waiting.reject(error);
      line.queue.unshift(...keep);
    }
  }

  /** Forgets destinations with nothing waiting and no pace left to keep. */
  function forgetIdle(): void {
    const now = Date.now();
    for (const [key, line] of lines) {
      if (!line.running && line.queue.length === 0 && line.notBefore <= now) lines.delete(key);
    }
  }

  return {
    /** Delivers one submission, alone or in a digest with others waiting for the destination. */
    deliver(request: DeliveryRequest<unknown>): Promise<DeliveryReceipt> {
      // One line per destination and config: an edited webhook URL starts a new one.
      const key = `${request.destinationId}\u0000${JSON.stringify(request.config)}`;
      let line = lines.get(key);
      if (line === undefined) {
        if (lines.size >= MAX_LINES) forgetIdle();
        line = { queue: [], notBefore: 0, running: false };
        lines.set(key, line);
      }
      const { promise, resolve, reject } = Promise.withResolvers<DeliveryReceipt>();
      const queuedAt = Date.now();
      line.queue.push({ request, deadline: queuedAt + spec.maxWaitMs, queuedAt, resolve, reject });
      if (!line.running) {
        line.running = true;
        line.notBefore = Math.max(line.notBefore, Date.now() + GATHER_MS);
        drain(key, line);
      }
      return promise;
    },
  };
}
