/**
 * Admin routes of a form's deliveries: the list of recent outcomes (no payloads), and
 * redelivery of what is still held or retained, one delivery or all of a destination's
 * since a time.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { getDestination } from "../store/destinations.ts";
import { listOutcomes } from "../store/outcomes.ts";
import {
  parseDeliveryId,
  redeliver,
  type Redelivery,
  type RedeliverySelection,
} from "../store/redelivery.ts";
import { sendNow } from "../store/send_now.ts";
import type { DeliveryOutcome } from "../store/outcomes.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { requireForm } from "./forms.ts";
import { readEmptyBody, readValidJson, refuseOtherMethods, validate } from "./http.ts";
import { ApiError, ERRORS, type ErrorSpec } from "../errors.ts";

/** Query of `GET /forms/:id/deliveries`. */
export const deliveriesQuerySchema = z.strictObject({
  limit: z.coerce.number().int().min(1).max(500).default(50),
});
/** Body of `POST /forms/:id/destinations/:destId/redeliver`. */
export const redeliverSinceSchema = z.strictObject({ since: z.iso.datetime({ offset: true }) });

/** The 409 answers of `POST …/deliveries/:deliveryId/send-now`, by what was found. */
export const SEND_NOW_CONFLICTS = {
  in_flight: ERRORS.redeliveryUnderWay,
  held: ERRORS.redeliveryPaused,
  not_waiting: ERRORS.sendNowNotWaiting,
} as const;

/**
 * A delivery outcome as the API lists it: with its `deliveryId`
 * (`<submissionId>.<destinationId>`, the webhook's `webhook-id`), the name the
 * redelivery and send-now routes take.
 */
function outcomeView(outcome: DeliveryOutcome) {
  return { deliveryId: `${outcome.submissionId}.${outcome.destinationId}`, ...outcome };
}

/**
 * `GET /forms/:id/deliveries`: recent delivery outcomes of a form, newest first, no
 * payloads; `POST /forms/:id/deliveries/:deliveryId/redeliver`,
 * `POST /forms/:id/deliveries/:deliveryId/send-now` and
 * `POST /forms/:id/destinations/:destId/redeliver` (`{ since }`).
 */
export function deliveryRoutes({ config, db, engine }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.get("/forms/:id/deliveries", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const { limit } = validate(deliveriesQuerySchema, c.req.query());
    const outcomes = await listOutcomes(db, form.id, limit);
    return c.json({ ok: true, deliveries: outcomes.map(outcomeView) });
  });

  /**
   * Redelivers a selection of an enabled destination's deliveries and wakes them here.
   * One delivery goes through a pause (a probe); all since a time need a resume first.
   */
  async function redeliverTo(
    selection: Omit<RedeliverySelection, "now">,
    notFound: ErrorSpec,
  ): Promise<Redelivery> {
    const destination = await getDestination(db, selection.formId, selection.destinationId);
    if (destination === null) throw new ApiError(notFound);
    if (!destination.isEnabled) throw new ApiError(ERRORS.redeliveryDisabled);
    if (destination.health.state === "paused" && selection.submissionId === undefined) {
      throw new ApiError(ERRORS.redeliveryPaused);
    }
    const result = await redeliver(db, { ...selection, now: Date.now() });
    engine?.wake(result.woken);
    return result;
  }

  const notHeld = () =>
    config.failedRetentionMs > 0 ? ERRORS.redeliveryGone : ERRORS.redeliveryNotRetained;

  router.post("/forms/:id/deliveries/:deliveryId/redeliver", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    await readEmptyBody(c);
    const ref = parseDeliveryId(c.req.param("deliveryId"));
    if (ref === null) throw new ApiError(ERRORS.deliveryNotFound);
    const result = await redeliverTo({ formId: form.id, ...ref }, ERRORS.deliveryNotFound);
    if (result.woken.length === 0) {
      if (result.underWay > 0) throw new ApiError(ERRORS.redeliveryUnderWay);
      throw new ApiError(notHeld());
    }
    return c.json({ ok: true, redelivered: result.woken.length });
  });

  // Only a delivery waiting for its next retry: the rest is what redeliver is for.
  router.post("/forms/:id/deliveries/:deliveryId/send-now", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    await readEmptyBody(c);
    const ref = parseDeliveryId(c.req.param("deliveryId"));
    if (ref === null) throw new ApiError(ERRORS.deliveryNotFound);
    const result = await sendNow(db, { formId: form.id, ...ref, now: Date.now() });
    if ("state" in result) throw new ApiError(SEND_NOW_CONFLICTS[result.state]);
    engine?.wake([result.sent]);
    return c.json({ ok: true });
  });

  router.post("/forms/:id/destinations/:destId/redeliver", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const { since } = await readValidJson(c, redeliverSinceSchema);
    const result = await redeliverTo(
      { formId: form.id, destinationId: c.req.param("destId"), since: Date.parse(since) },
      ERRORS.destinationNotFound,
    );
    return c.json({
      ok: true,
      redelivered: result.woken.length,
      underWay: result.underWay,
      expired: result.expired,
    });
  });

  refuseOtherMethods(
    router,
    "/forms/:id/deliveries",
    "/forms/:id/deliveries/:deliveryId/redeliver",
    "/forms/:id/deliveries/:deliveryId/send-now",
    "/forms/:id/destinations/:destId/redeliver",
  );
  return router;
}
