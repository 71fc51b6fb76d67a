import { createMiddleware } from "hono/factory";
import { authenticateTenantKey } from "../store/orgs.ts";
import type { Db } from "../store/db.ts";
import { ApiError } from "./http.ts";
import type { AdminEnv } from "./app_deps.ts";
import { ERRORS } from "./errors.ts";

/**
 * Admin authentication: an active `sk_` key in `x-tenant-key` (spec section 5); a key
 * kept by a rotation with an overlap stops at its end exactly, checked here on every use.
 */
export function tenantAuth(db: Db, now: () => number) {
  return createMiddleware<AdminEnv>(async (c, next) => {
    const key = c.req.header("x-tenant-key");
    if (key === undefined || key === "") throw new ApiError(ERRORS.missingTenantKey);
    // Hashing a huge header costs time; a real key is short.
    const orgId = key.length <= 200 ? await authenticateTenantKey(db, key, now()) : null;
    if (orgId === null) throw new ApiError(ERRORS.invalidTenantKey);
    c.set("orgId", orgId);
    await next();
  });
}
