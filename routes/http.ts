import { concatBytes } from "../bytes.ts";
import type { Context, Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { z } from "zod";
import { humanMessages } from "../validation_messages.ts";
import type { ErrorSpec, RefusalReason } from "./errors.ts";
import { ERRORS } from "./errors.ts";

/** A strict UTF-8 decoder (invalid bytes throw), shared: decode() keeps no state between calls. */
export const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * An error answer of the catalogue (routes/errors.ts) with the contract's body
 * `{ ok: false, error, ...details }`.
 */
export class ApiError extends HTTPException {
  readonly details: Record<string, unknown>;
  /** Why a submission was refused, for metrics (the catalogue's reason). */
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

/** What the admin body readers need of a route's environment (AdminEnv has it). */
type BodyEnv = { Variables: { bodyTimeoutMs: number } };

/** Admin request bodies: JSON only, at most 64 KB. */
export const ADMIN_BODY_LIMIT = 64 * 1024;

/** Reads an admin JSON body: 415 for another type, 413 over the limit, 400 for bad JSON. */
export async function readJsonBody<E extends BodyEnv>(c: Context<E>): Promise<unknown> {
  const type = c.req.header("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new ApiError(ERRORS.adminContentType);
  }
  const declared = Number(c.req.header("content-length") ?? "0");
  if (declared > ADMIN_BODY_LIMIT) throw new ApiError(ERRORS.adminTooLarge);
  const bytes = await readBodyWithin(c, {
    limit: ADMIN_BODY_LIMIT,
    declaredLength: null,
    timeoutMs: c.var.bodyTimeoutMs,
    // A client that hangs up before its declared length is a bad request, not our error.
    hangUp: () => new ApiError(ERRORS.invalidJsonBody),
  });
  if (bytes === null) throw new ApiError(ERRORS.adminTooLarge);
  try {
    return JSON.parse(strictUtf8.decode(bytes));
  } catch {
    throw new ApiError(ERRORS.invalidJsonBody);
  }
}

/** Reads an admin JSON body (see readJsonBody) and validates it (see validate). */
export async function readValidJson<T, E extends BodyEnv>(
  c: Context<E>,
  schema: z.ZodType<T>,
): Promise<T> {
  return validate(schema, await readJsonBody(c));
}

/**
 * Reads a body stream up to `limit` bytes; null as soon as it goes over, without
 * buffering the rest (the stream is cancelled).
 */
export async function readCapped(
  body: ReadableStream<Uint8Array<ArrayBuffer>> | null,
  limit: number,
): Promise<Uint8Array<ArrayBuffer> | null> {
  if (body === null) return new Uint8Array(0);
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  let size = 0;
  const reader = body.getReader();
  while (true) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
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

/** The body did not arrive within its deadline. */
class LateBody extends Error {}

/** Body reads under way, each with its deadline (performance.now()) and how to end it late. */
const pendingReads = new Set<{ deadline: number; late(): void }>();
let deadlineWatch: ReturnType<typeof setInterval> | undefined;
/** How often body deadlines are checked: they hold to within this. */
const BODY_DEADLINE_CHECK_MS = 100;

/**
 * Ends `reading` with LateBody once `timeoutMs` have passed. One interval watches every
 * read under way (and stops when none is), so a request pays no timer of its own.
 */
function within<T>(reading: Promise<T>, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const entry = { deadline: performance.now() + timeoutMs, late: () => reject(new LateBody()) };
    pendingReads.add(entry);
    deadlineWatch ??= setInterval(() => {
      const now = performance.now();
      for (const read of pendingReads) {
        if (now < read.deadline) continue;
        pendingReads.delete(read);
        read.late();
      }
      if (pendingReads.size === 0) {
        clearInterval(deadlineWatch);
        deadlineWatch = undefined;
      }
    }, BODY_DEADLINE_CHECK_MS);
    reading.then(resolve, reject).finally(() => pendingReads.delete(entry));
  });
}

/**
 * Reads a request body of at most `limit` bytes within `timeoutMs`: null when it is
 * longer; throws 408 (and marks the answer to close the connection) when late, and the
 * `hangUp` error when the client went away before sending all of it. With a declared
 * length within the limit the runtime delivers no more than that, so it is read whole.
 */
export async function readBodyWithin(
  c: Context,
  options: {
    limit: number;
    declaredLength: number | null;
    timeoutMs: number;
    /** The error for a client that hung up (made only then: an error's stack costs). */
    hangUp: () => ApiError;
  },
): Promise<Uint8Array<ArrayBuffer> | null> {
  const request = c.req.raw;
  const reading = options.declaredLength !== null && options.declaredLength <= options.limit
    ? request.arrayBuffer().then((b) => new Uint8Array(b))
    : readCapped(request.body, options.limit);
  try {
    const bytes = await within(reading, options.timeoutMs);
    return bytes !== null && bytes.length > options.limit ? null : bytes;
  } catch (error) {
    if (!(error instanceof LateBody)) throw options.hangUp();
    // The connection goes (the runtime closes it after this answer), which also ends
    // the read still pending.
    reading.catch(() => {});
    c.header("Connection", "close");
    throw new ApiError(ERRORS.bodyTimeout);
  }
}

/** The only body the admin routes that take none accept: none, or `{}`. */
export const emptyBody = z.strictObject({});

/**
 * The request needs no body: none at all, or an empty JSON object. Anything else is
 * refused as the other admin routes would (415, 413, `400 Invalid JSON body`,
 * `400 Validation error`).
 */
export async function readEmptyBody<E extends BodyEnv>(c: Context<E>): Promise<void> {
  if (c.req.header("content-type") === undefined) {
    // A client that hangs up mid-body is a bad request, not our error.
    const bytes = await readCapped(c.req.raw.body, ADMIN_BODY_LIMIT).catch(() => {
      throw new ApiError(ERRORS.invalidJsonBody);
    });
    if (bytes !== null && bytes.length === 0) return;
  }
  await readValidJson(c, emptyBody);
}
