import { concatBytes } from "../bytes.ts";
import type { Context, Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { z } from "zod";
import { humanMessages } from "../validation_messages.ts";
import type { RefusalReason } from "../refusal_reasons.ts";
import type { ErrorSpec } from "./errors.ts";
import { ERRORS } from "./errors.ts";

/** A strict UTF-8 decoder (invalid bytes throw), shared: decode() keeps no state between calls. */
export const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * An error answer of the catalogue (routes/errors.ts) with the contract's body
 * `{ ok: false, error, ...details }`.
 */
export class ApiError extends HTTPException {
  readonly details: Record<string, unknown>;
  /** Why a submission was refused (the catalogue's reason), for the refusal counts. */
  readonly reason: RefusalReason | undefined;
  constructor(error: ErrorSpec, details: Record<string, unknown> = {}) {
    super(error.status, { message: error.text });
    this.details = details;
    this.reason = error.reason;
  }
}

/** The JSON error body of the contract. */
export function errorBody(error: string, details: Record<string, unknown> = {}) {
  return { ok: false as const, error, ...details };
}

/** Issue list of `400 Validation error`: dotted paths under an optional prefix. */
export function validationIssues(error: z.ZodError, prefix: PropertyKey[] = []) {
  return error.issues.map((issue) => ({
    path: [...prefix, ...issue.path].map(String).join("."),
    message: issue.message,
  }));
}

/**
 * Parses with a zod schema or throws `400 Validation error` listing each issue, in plain
 * words (validation_messages.ts).
 */
export function validate<T>(schema: z.ZodType<T>, input: unknown, prefix: PropertyKey[] = []): T {
  const result = schema.safeParse(input, { error: humanMessages });
  if (!result.success) {
    throw new ApiError(ERRORS.validation, { issues: validationIssues(result.error, prefix) });
  }
  return result.data;
}

/**
 * How long a request body may take: all of it within `timeoutMs`, and once `graceMs`
 * have passed, at least `minBytesPerSecond` on average since then (0: no minimum).
 */
export interface BodyTiming {
  timeoutMs: number;
  graceMs: number;
  minBytesPerSecond: number;
}

/** What the admin body readers need of a route's environment (AdminEnv has it). */
type BodyEnv = { Variables: { bodyTiming: BodyTiming } };

/** The Content-Type of a JSON body, parameters allowed. */
const JSON_TYPE = /^application\/json\s*(;|$)/i;

/** Admin request bodies: JSON only, at most 64 KB. */
export const ADMIN_BODY_LIMIT = 64 * 1024;

/** Reads an admin JSON body: 415 for another type, 413 over the limit, 400 for bad JSON. */
export async function readJsonBody<E extends BodyEnv>(c: Context<E>): Promise<unknown> {
  if (!JSON_TYPE.test(c.req.header("content-type") ?? "")) {
    throw new ApiError(ERRORS.adminContentType);
  }
  return parseJsonBody(await readAdminBody(c));
}

/** A body's bytes as JSON, or `400 Invalid JSON body`. */
function parseJsonBody(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(strictUtf8.decode(bytes));
  } catch {
    throw new ApiError(ERRORS.invalidJsonBody);
  }
}

/** An admin body, whatever its type, within ADMIN_BODY_LIMIT and the body timing. */
async function readAdminBody<E extends BodyEnv>(c: Context<E>): Promise<Uint8Array> {
  const declared = declaredLength(c);
  if (declared !== null && declared > ADMIN_BODY_LIMIT) throw new ApiError(ERRORS.adminTooLarge);
  const bytes = await readBodyWithin(c, {
    limit: ADMIN_BODY_LIMIT,
    timing: c.var.bodyTiming,
    // A client that hangs up before its declared length is a bad request, not our error.
    hangUp: () => new ApiError(ERRORS.invalidJsonBody),
  });
  if (bytes === null) throw new ApiError(ERRORS.adminTooLarge);
  return bytes;
}

/** Reads an admin JSON body (see readJsonBody) and validates it (see validate). */
export async function readValidJson<T, E extends BodyEnv>(
  c: Context<E>,
  schema: z.ZodType<T>,
): Promise<T> {
  return validate(schema, await readJsonBody(c));
}

/**
 * The request's Content-Length, null when it has none (chunked). It feeds the body
 * budget, so it is read strictly: one plain decimal number up to 2^53 - 1. A header
 * sent twice arrives joined (`7, 7`); that, a list, a sign, a fraction, hex, white
 * space inside or a number past 2^53 is `400 Invalid Content-Length header`, before
 * any budget is touched.
 */
export function declaredLength(c: Context): number | null {
  const header = c.req.header("content-length");
  if (header === undefined) return null;
  const length = /^\d{1,16}$/.test(header) ? Number(header) : NaN;
  if (!Number.isSafeInteger(length)) throw new ApiError(ERRORS.invalidContentLength);
  return length;
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

/** Answers 405 for every other method on the given paths (register after the real routes). */
// deno-lint-ignore no-explicit-any
export function refuseOtherMethods(router: Hono<any>, ...paths: string[]): void {
  for (const path of paths) {
    router.all(path, () => {
      throw new ApiError(ERRORS.methodNotAllowed);
    });
  }
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
 * Reads a request body of at most `limit` bytes within `timing`: null when it is
 * longer; throws 408 (and marks the answer to close the connection) when it is late
 * or slower than the minimum rate, or when the budget took its `room` back, and the
 * `hangUp` error when the client went away before sending all of it.
 */
export async function readBodyWithin(
  c: Context,
  options: {
    limit: number;
    timing: BodyTiming;
    /** The error for a client that hung up (made only then: an error's stack costs). */
    hangUp: () => ApiError;
    room?: BodyRoom;
  },
): Promise<Uint8Array<ArrayBuffer> | null> {
  const { limit, timing } = options;
  const progress = { received: 0 };
  const start = performance.now();
  const read = within(readCapped(c.req.raw.body, limit, progress), {
    start,
    deadline: start + timing.timeoutMs,
    graceEnd: start + timing.graceMs,
    minRate: timing.minBytesPerSecond,
    progress,
  });
  const listenerDone = (c.env as BodyWatch | undefined)?.readingBody?.();
  const roomDone = options.room?.reading(read.end);
  try {
    return await read.result;
  } catch (error) {
    if (!(error instanceof LateBody)) throw options.hangUp();
    // The connection goes (the runtime closes it after this answer), which also ends
    // the read still pending.
    c.header("Connection", "close");
    throw new ApiError(ERRORS.bodyTimeout);
  } finally {
    listenerDone?.();
    roomDone?.();
  }
}

/** The only body the admin routes that take none accept: none, or `{}`. */
export const emptyBody = z.strictObject({});

/**
 * The request needs no body: none at all (whatever its Content-Type says: clients send
 * `application/json` with every request), or an empty JSON object. Anything else is
 * refused as the other admin routes would (415, 413, `400 Invalid JSON body`,
 * `400 Validation error`).
 */
export async function readEmptyBody<E extends BodyEnv>(c: Context<E>): Promise<void> {
  await readOptionalJson(c, emptyBody);
}

/**
 * A body that may be left out: none at all (whatever its Content-Type says) is read as
 * `{}`; anything else is read and validated as readValidJson does.
 */
export async function readOptionalJson<T, E extends BodyEnv>(
  c: Context<E>,
  schema: z.ZodType<T>,
): Promise<T> {
  // Under the same deadline and cap as any other body.
  const bytes = await readAdminBody(c);
  if (bytes.length === 0) return validate(schema, {});
  if (!JSON_TYPE.test(c.req.header("content-type") ?? "")) {
    throw new ApiError(ERRORS.adminContentType);
  }
  return validate(schema, parseJsonBody(bytes));
}
