/**
 * The admin API's 429 answers (their texts are in errors.ts): the answer itself
 * (with `Retry-After`), and the
 * per-organization limit of operations that touch delivery jobs (resume, redelivery,
 * changing or deleting a destination).
 *
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { createTokenBuckets } from "../delivery/token_buckets.ts";
import type { AdminEnv } from "./app_deps.ts";
import { ApiError, ERRORS, type ErrorSpec } from "../errors.ts";

/**
 * Throws `429` with `Retry-After` (whole seconds, at least 1) and `retryAfter` in the body;
 * `detail` says which limit.
 */
export function tooManyRequests(
  c: Context,
  error: ErrorSpec,
  options: { retryAfterMs: number; detail?: string },
): never {
  const retryAfter = Math.max(1, Math.ceil(options.retryAfterMs / 1000));
  c.header("Retry-After", String(retryAfter));
  const details: Record<string, unknown> = { retryAfter };
  if (options.detail !== undefined) details.detail = options.detail;
  throw new ApiError(error, details);
}

/** Operations per organization per minute (0: no limit); past it `429` with Retry-After. */
export function organizationOperationLimit(perMinute: number): MiddlewareHandler<AdminEnv> {
  const buckets = createTokenBuckets({ capacity: perMinute, windowMs: 60_000 });
  return async (c, next) => {
    const orgId = c.get("orgId");
    const now = Date.now();
    const waitMs = buckets.waitMs(orgId, 1, now);
    if (waitMs > 0) tooManyRequests(c, ERRORS.tooManyOperations, { retryAfterMs: waitMs });
    buckets.take(orgId, 1, now);
    await next();
  };
}
