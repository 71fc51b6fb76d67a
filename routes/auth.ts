import { createMiddleware } from "hono/factory";
import { authenticateTenantKey } from "../store/orgs.ts";
import type { Db } from "../store/db.ts";
import type { AdminEnv } from "./app_deps.ts";
import { ApiError, ERRORS } from "../errors.ts";

/**
 * Admin authentication: an active `sk_` key in `x-tenant-key` (spec section 5); a key
 * kept by a rotation with an overlap stops at its end exactly, checked here on every use.
 */
export function tenantAuth(db: Db, now: () => number) {
  return createMiddleware<AdminEnv>(async (c, next) => {
    const key = c.req.header("x-tenant-key");
    if (key === undefined || key === "") throw new ApiError(ERRORS.missingTenantKey);
    // Hashing a huge header costs time; a real key is short.
    const opened = key.length <= 200 ? await authenticateTenantKey(db, key, now()) : null;
    if (opened === null) throw new ApiError(ERRORS.invalidTenantKey);
    // A 401 as for any key that opens nothing, with a text of its own: the owner reads why.
    if (opened === "disabled") throw new ApiError(ERRORS.orgDisabled);
    c.set("orgId", opened.orgId);
    await next();
  });
}
