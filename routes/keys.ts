import { Hono } from "hono";
import { rotateTenantKey } from "../store/orgs.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { refuseOtherMethods } from "./http.ts";
import { ApiError, ERRORS } from "../errors.ts";

/** `POST /keys/rotate` (spec 4.2). */
export function keyRoutes({ db, notifier, logger }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.post("/keys/rotate", async (c) => {
    const tenantKey = await rotateTenantKey(db, c.req.header("x-tenant-key")!);
    if (tenantKey === null) throw new ApiError(ERRORS.invalidTenantKey);
    // Owner notifications: the owner hears of every rotation (never the key).
    const orgId = c.get("orgId");
    await notifier?.record({ orgId, type: "tenant_key.rotated", subject: "org" }).catch((error) =>
      logger.error("notification event not recorded", { orgId, error: String(error) })
    );
    return c.json({ ok: true, tenantKey });
  });
  refuseOtherMethods(router, "/keys/rotate");
  return router;
}
