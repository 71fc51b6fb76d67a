/**
 * `POST /keys/rotate` (spec 4.2): without a body every earlier key stops at once, as the
 * spec says; an addition beyond it, `{ "expiresInHours": N }`, keeps them working until
 * then (at most 7 days), so clients change over without an outage.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { MAX_KEY_OVERLAP_HOURS, rotateTenantKey } from "../store/orgs.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { readOptionalJson, refuseOtherMethods } from "./http.ts";
import { ApiError, ERRORS } from "../errors.ts";

/** The optional body of `POST /keys/rotate` (an addition beyond the spec). */
export const keyRotateSchema = z.strictObject({
  expiresInHours: z.number().min(0).max(MAX_KEY_OVERLAP_HOURS).optional().meta({
    description: "How long the earlier keys keep working, in hours (left out or 0: they stop " +
      `at once, as the spec says; at most ${MAX_KEY_OVERLAP_HOURS})`,
  }),
});
import { jsonBodyErrors, ok, type OperationSpec, timestamp } from "./operation_spec.ts";

/** `POST /keys/rotate` (spec 4.2). */
export function keyRoutes({ db, notifier, logger, now = Date.now }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.post("/keys/rotate", async (c) => {
    const { expiresInHours } = await readOptionalJson(c, keyRotateSchema);
    const at = now();
    const rotated = await rotateTenantKey(db, c.req.header("x-tenant-key")!, {
      now: at,
      overlapMs: (expiresInHours ?? 0) * 3_600_000,
    });
    if (rotated === null) throw new ApiError(ERRORS.invalidTenantKey);
    const { tenantKey, previousValidUntil } = rotated;
    // Owner notifications: the owner hears of every rotation and when the earlier keys
    // stop (never the key).
    const orgId = c.get("orgId");
    const stops = previousValidUntil ?? new Date(at).toISOString();
    await notifier?.record({ orgId, type: "tenant_key.rotated", subject: "org", detail: stops })
      .catch((error) =>
        logger.error("notification event not recorded", { orgId, error: String(error) })
      );
    // Called as the spec says (no expiresInHours), the answer is the spec's.
    if (expiresInHours === undefined) return c.json({ ok: true, tenantKey });
    return c.json({ ok: true, tenantKey, previousKeysValidUntil: previousValidUntil });
  });
  refuseOtherMethods(router, "/keys/rotate");
  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const keyOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/keys/rotate",
    summary: "Rotate the tenant key: every active key stops working, the new one is shown " +
      "once; with expiresInHours (an addition) the earlier keys work until then",
    tag: "Admin: keys",
    admin: true,
    body: { schema: keyRotateSchema, required: false },
    answers: {
      200: {
        description: "The new key (not retrievable later); with a body, until when the " +
          "earlier keys work (null: they stopped)",
        schema: z.strictObject({
          ok,
          tenantKey: z.string().startsWith("sk_"),
          previousKeysValidUntil: timestamp.nullable().optional(),
        }),
      },
    },
    errors: jsonBodyErrors,
  },
];
