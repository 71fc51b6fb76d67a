import { Hono } from "hono";
import { rotateTenantKey } from "../store/orgs.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { ApiError, refuseOtherMethods } from "./http.ts";
import { ERRORS } from "./errors.ts";
import { ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";

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

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const keyOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/keys/rotate",
    summary: "Rotate the tenant key: every active key stops working, the new one is shown once",
    tag: "Admin: keys",
    admin: true,
    answers: {
      200: {
        description: "The new key (not retrievable later)",
        schema: z.strictObject({ ok, tenantKey: z.string().startsWith("sk_") }),
      },
    },
    errors: [],
  },
];
