/**
 * Reading a request body within bounds of size and time, free of any HTTP framework:
 * the admin routes (routes/http.ts) and ingestion (ingest/steps.ts) both read through
 * {@linkcode readBodyWithin} and turn what it found into their own answers.
 *
 * @module
 */
import { concatBytes } from "./bytes.ts";
import type { Config } from "./config.ts";

/**
 * How long a request body may take: all of it within `timeoutMs`, and once `graceMs`
 * have passed, at least `minBytesPerSecond` on average since then (0: no minimum).
 */
export interface BodyTiming {
  timeoutMs: number;
  graceMs: number;
  minBytesPerSecond: number;
}

/** How long request bodies may take, from the configuration. */
export function bodyTimingOf(config: Config): BodyTiming {
  return {
    timeoutMs: config.http.bodyTimeoutMs,
    graceMs: config.http.bodyGraceMs,
    minBytesPerSecond: config.http.bodyMinBytesPerSecond,
  };
}

/**
 * Reads a body stream up to `limit` bytes; null as soon as it goes over, without
 * buffering the rest (the stream is cancelled).
 */
async function readCapped(
  body: ReadableStream<Uint8Array<ArrayBuffer>> | null,
  limit: number,
  progress: { received: number } = { received: 0 },
): Promise<Uint8Array<ArrayBuffer> | null> {
  if (body === null) return new Uint8Array(0);
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  let size = 0;
  const reader = body.getReader();
  while (true) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    progress.received = size;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  return chunks.length === 1 ? chunks[0] : concatBytes(chunks);
}

/** The body did not arrive within its deadline, or its room was needed (ingest/body_gate.ts). */
class LateBody extends Error {}

/** A body read under way: when it began, its deadline, what it received, how to end it. */
interface PendingRead {
  start: number;
  deadline: number;
  /** Bytes a second required once `graceEnd` has passed (0: none). */
  minRate: number;
  graceEnd: number;
  progress: { received: number };
  late(): void;
}

/** Body reads under way (times are performance.now()). */
const pendingReads = new Set<PendingRead>();
let deadlineWatch: ReturnType<typeof setInterval> | undefined;
/** How often body deadlines and rates are checked: they hold to within this. */
const BODY_DEADLINE_CHECK_MS = 100;

/** Whether a read is past its deadline or, after its grace, behind its minimum rate. */
function isLate(read: PendingRead, now: number): boolean {
  if (now >= read.deadline) return true;
  return read.minRate > 0 && now > read.graceEnd &&
    read.progress.received < (now - read.graceEnd) * read.minRate / 1000;
}

/**
 * Ends `reading` with LateBody once `read` is late (or ended by its `late`). One
 * interval watches every read under way (and stops when none is), so a request pays
 * no timer of its own.
 */
function within<T>(reading: Promise<T>, read: Omit<PendingRead, "late">): {
  result: Promise<T>;
  /** Ends the read now, as if late. */
  end(): void;
} {
  let end = () => {};
  const result = new Promise<T>((resolve, reject) => {
    const entry: PendingRead = { ...read, late: () => reject(new LateBody()) };
    end = () => {
      pendingReads.delete(entry);
      entry.late();
    };
    pendingReads.add(entry);
    deadlineWatch ??= setInterval(() => {
      const now = performance.now();
      for (const pending of pendingReads) {
        if (!isLate(pending, now)) continue;
        pendingReads.delete(pending);
        pending.late();
      }
      if (pendingReads.size === 0) {
        clearInterval(deadlineWatch);
        deadlineWatch = undefined;
      }
    }, BODY_DEADLINE_CHECK_MS);
    reading.then(resolve, reject).finally(() => pendingReads.delete(entry));
  });
  return { result, end };
}

/**
 * What the listener lends each request (listener.ts passes it as the handler's second
 * argument, Hono's `c.env`): it is told while a body is being read, so that a
 * connection whose body is slow can be closed to make room under pressure.
 */
export interface BodyWatch {
  /** A body starts being read; call the returned function once it is read. */
  readingBody?(): () => void;
}

/** Room a request body holds in the body budget (ingest/body_gate.ts). */
export interface BodyRoom {
  /** The body is being read: `end` cuts the read short; call the result once it is read. */
  reading(end: () => void): () => void;
}

/**
 * What reading a body found: its bytes, or that it was longer than the limit, late
 * (past its deadline, slower than the minimum rate, or its room taken back by the
 * budget: the connection should then be closed), or cut off by a client that hung up.
 */
export type BodyRead = Uint8Array<ArrayBuffer> | "too_large" | "late" | "hung_up";

/**
 * Reads a request body of at most `limit` bytes within `timing`, telling the listener
 * (`watch`) while it reads and giving way when the body budget takes its `room` back.
 */
export async function readBodyWithin(
  source: { body: ReadableStream<Uint8Array<ArrayBuffer>> | null; watch?: BodyWatch },
  options: { limit: number; timing: BodyTiming; room?: BodyRoom },
): Promise<BodyRead> {
  const { limit, timing } = options;
  const progress = { received: 0 };
  const start = performance.now();
  const read = within(readCapped(source.body, limit, progress), {
    start,
    deadline: start + timing.timeoutMs,
    graceEnd: start + timing.graceMs,
    minRate: timing.minBytesPerSecond,
    progress,
  });
  const listenerDone = source.watch?.readingBody?.();
  const roomDone = options.room?.reading(read.end);
  try {
    return (await read.result) ?? "too_large";
  } catch (error) {
    return error instanceof LateBody ? "late" : "hung_up";
  } finally {
    listenerDone?.();
    roomDone?.();
  }
}

/**
 * A request's Content-Length, null when it has none (chunked). It feeds the body
 * budget, so it is read strictly: one plain decimal number up to 2^53 - 1. A header
 * sent twice arrives joined (`7, 7`); that, a list, a sign, a fraction, hex, white
 * space inside or a number past 2^53 is `"invalid"` (answered `400 Invalid
 * Content-Length header`), before any budget is touched.
 */
export function declaredLength(header: string | undefined): number | null | "invalid" {
  if (header === undefined) return null;
  const length = /^\d{1,16}$/.test(header) ? Number(header) : NaN;
  return Number.isSafeInteger(length) ? length : "invalid";
}
