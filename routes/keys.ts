import { Hono } from "hono";
import { rotateTenantKey } from "../store/orgs.ts";
import type { AdminEnv, AppDeps } from "./env.ts";
import { ApiError, refuseOtherMethods } from "./http.ts";
import { ERRORS } from "./errors.ts";

/** `POST /keys/rotate` (spec 4.2). */
export function keyRoutes({ db }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.post("/keys/rotate", async (c) => {
    const tenantKey = await rotateTenantKey(db, c.req.header("x-tenant-key")!);
    if (tenantKey === null) throw new ApiError(ERRORS.invalidTenantKey);
    return c.json({ ok: true, tenantKey });
  });
  refuseOtherMethods(router, "/keys/rotate");
  return router;
}
