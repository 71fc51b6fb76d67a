import { strictUtf8 } from "../bytes.ts";
import {
  type BodyTiming,
  type BodyWatch,
  declaredLength,
  readBodyWithin,
} from "../body_reading.ts";
import type { Context, Hono } from "hono";
import { z } from "zod";
import { humanMessages } from "../validation_messages.ts";
import { ApiError, ERRORS } from "../errors.ts";

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
  const declared = declaredLength(c.req.header("content-length"));
  if (declared === "invalid") throw new ApiError(ERRORS.invalidContentLength);
  if (declared !== null && declared > ADMIN_BODY_LIMIT) throw new ApiError(ERRORS.adminTooLarge);
  const read = await readBodyWithin(
    { body: c.req.raw.body, watch: c.env as BodyWatch | undefined },
    { limit: ADMIN_BODY_LIMIT, timing: c.var.bodyTiming },
  );
  if (read === "too_large") throw new ApiError(ERRORS.adminTooLarge);
  if (read === "late") {
    // The connection goes (the runtime closes it after this answer), which also ends
    // the read still pending.
    c.header("Connection", "close");
    throw new ApiError(ERRORS.bodyTimeout);
  }
  // A client that hangs up before its declared length is a bad request, not our error.
  if (read === "hung_up") throw new ApiError(ERRORS.invalidJsonBody);
  return read;
}

/** Reads an admin JSON body (see readJsonBody) and validates it (see validate). */
export async function readValidJson<T, E extends BodyEnv>(
  c: Context<E>,
  schema: z.ZodType<T>,
): Promise<T> {
  return validate(schema, await readJsonBody(c));
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
