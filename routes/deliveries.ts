/**
 * Admin route listing a form's recent delivery outcomes (no payloads).
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { listOutcomes } from "../store/outcomes.ts";
import type { AdminEnv, AppDeps } from "./env.ts";
import { requireForm } from "./forms.ts";
import { refuseOtherMethods, validate } from "./http.ts";

/** Query of `GET /forms/:id/deliveries`. */
export const deliveriesQuerySchema = z.strictObject({
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

/** `GET /forms/:id/deliveries`: recent delivery outcomes of a form, newest first, no payloads. */
export function deliveryRoutes({ db }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.get("/forms/:id/deliveries", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const { limit } = validate(deliveriesQuerySchema, c.req.query());
    return c.json({ ok: true, deliveries: await listOutcomes(db, form.id, limit) });
  });
  refuseOtherMethods(router, "/forms/:id/deliveries");
  return router;
}
