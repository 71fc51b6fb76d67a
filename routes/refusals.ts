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
import { FORM_404, ok, type OperationSpec, timestamp } from "./operation_spec.ts";
import { SPAM_RULES } from "../rules/spam.ts";
import { FORM_REFUSAL_REASONS } from "../refusal_reasons.ts";
import { ERRORS } from "../errors.ts";

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

/** Counts per spam rule (store/refusals.ts RuleCounts). */
const ruleCounts = z.strictObject(
  Object.fromEntries(SPAM_RULES.map((rule) => [rule, z.number().int()])),
);

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const refusalOperations: OperationSpec[] = [
  {
    method: "get",
    path: "/v1/admin/forms/{id}/refusals",
    summary: "What never reached the form's destinations, per UTC day and reason " +
      "(origin, captcha, captcha_unavailable: the captcha service gave no verdict, rate_limit, " +
      "size, invalid, spam, nowhere: accepted with no enabled destination)",
    tag: "Admin: forms",
    admin: true,
    query: refusalsQuerySchema,
    answers: {
      200: {
        description: "Counts of the last `days` UTC days, today last",
        schema: z.strictObject({
          ok,
          days: z.array(z.strictObject({
            day: z.string().meta({ description: "YYYY-MM-DD (UTC)" }),
            ...Object.fromEntries(
              FORM_REFUSAL_REASONS.map((reason) => [reason, z.number().int()]),
            ),
            spamByRule: ruleCounts.meta({
              description: "`spam` by the rule that caught it; the honeypot's are the rest. " +
                "no_page_token: the page sent no page token (update its snippet)",
            }),
            observedByRule: ruleCounts.meta({
              description: "What rules in observe mode would have caught (delivered all the same)",
            }),
          })),
          refusedOrigins: z.array(z.strictObject({ origin: z.string(), lastSeen: timestamp }))
            .meta({
              description: "The last few (at most 5) distinct sites refused for their origin, " +
                "CORS preflights included, newest first: origins only, kept 30 days",
            }),
        }),
      },
    },
    errors: [ERRORS.validation, ...FORM_404],
  },
];
