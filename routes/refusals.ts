/**
 * `GET /forms/:id/refusals`: what never reached the form's destinations in the last
 * days, counted per UTC day and reason (store/refusals.ts), and the last few sites
 * refused for their origin, for the console to show.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { readRefusals, readRefusedOrigins } from "../store/refusals.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { requireForm } from "./forms.ts";
import { refuseOtherMethods, validate } from "./http.ts";

/** Query of `GET /forms/:id/refusals`. */
export const refusalsQuerySchema = z.strictObject({
  days: z.coerce.number().int().min(1).max(30).default(7),
});

/** `GET /forms/:id/refusals?days=` (1 to 30 UTC days, today last). */
export function refusalRoutes({ db, refusals: counter }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.get("/forms/:id/refusals", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const { days } = validate(refusalsQuerySchema, c.req.query());
    const [counts, refusedOrigins] = await Promise.all([
      readRefusals(db, form.id, { days, now: Date.now(), counter }),
      readRefusedOrigins(db, form.id, counter),
    ]);
    return c.json({
      ok: true,
      days: counts,
      refusedOrigins: refusedOrigins.map(({ origin, lastSeen }) => ({
        origin,
        lastSeen: new Date(lastSeen).toISOString(),
      })),
    });
  });
  refuseOtherMethods(router, "/forms/:id/refusals");
  return router;
}
