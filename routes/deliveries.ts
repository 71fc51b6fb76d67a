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
import { sendNow, sendWaitingNow } from "../store/send_now.ts";
import type { DeliveryOutcome } from "../store/outcomes.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { requireForm } from "./forms.ts";
import { emptyBody, readEmptyBody, readValidJson, refuseOtherMethods, validate } from "./http.ts";
import { ApiError, ERRORS, type ErrorSpec } from "../errors.ts";
import {
  DEST_404,
  FORM_404,
  jsonBodyErrors,
  ok,
  OPERATION_429,
  type OperationSpec,
  timestamp,
} from "./operation_spec.ts";
import { DESTINATION_TYPES } from "../connectors/registry.ts";
import { CONFIRMATION_DESTINATION_ID } from "../rules/confirmation.ts";

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
 * `POST /forms/:id/deliveries/:deliveryId/send-now`,
 * `POST /forms/:id/destinations/:destId/send-now` (all its deliveries waiting for a retry) and
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

  // Every delivery of a destination waiting for its next retry, e.g. once it is fixed.
  router.post("/forms/:id/destinations/:destId/send-now", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    await readEmptyBody(c);
    const destination = await getDestination(db, form.id, c.req.param("destId"));
    if (destination === null) throw new ApiError(ERRORS.destinationNotFound);
    if (!destination.isEnabled) throw new ApiError(ERRORS.redeliveryDisabled);
    if (destination.health.state === "paused") throw new ApiError(ERRORS.redeliveryPaused);
    const result = await sendWaitingNow(db, {
      formId: form.id,
      destinationId: destination.id,
      now: Date.now(),
    });
    engine?.wake(result.sent);
    return c.json({ ok: true, sent: result.sent.length, inFlight: result.inFlight });
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
    "/forms/:id/destinations/:destId/send-now",
  );
  return router;
}

/** One delivery outcome (store/jobs.ts DeliveryOutcome). */
export const outcomeSchema = z.strictObject({
  deliveryId: z.string().meta({
    description: "`<submissionId>.<destinationId>`: the name redeliver and send-now take",
  }),
  submissionId: z.uuid(),
  destinationId: z.union([z.uuid(), z.literal(CONFIRMATION_DESTINATION_ID)]).meta({
    description:
      "`confirmation` for the confirmation to the visitor (its address masked in detail)",
  }),
  destinationType: z.enum(DESTINATION_TYPES),
  status: z.enum(["retrying", "held", "delivered", "failed"]),
  attempts: z.number().int(),
  lastError: z.string().nullable(),
  lastStatusCode: z.number().int().nullable(),
  detail: z.string().nullable(),
  submittedAt: timestamp,
  updatedAt: timestamp,
  nextAttemptAt: timestamp.nullable(),
});

/** The refusals of an action on all of a destination's deliveries (redeliver, send now). */
const WHOLE_DESTINATION_ERRORS = [
  ...jsonBodyErrors,
  ...DEST_404,
  ERRORS.redeliveryDisabled,
  ERRORS.redeliveryPaused,
  ...OPERATION_429,
];

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const deliveryOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/forms/{id}/destinations/{destId}/redeliver",
    summary: "Deliver again every held or retained delivery of submissions accepted since a time",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: redeliverSinceSchema, required: true },
    answers: {
      200: {
        description: "How many were redelivered, found under way, or found expired",
        schema: z.strictObject({
          ok,
          redelivered: z.number().int(),
          underWay: z.number().int(),
          expired: z.number().int(),
        }),
      },
    },
    errors: WHOLE_DESTINATION_ERRORS,
  },
  {
    method: "post",
    path: "/v1/admin/forms/{id}/deliveries/{deliveryId}/redeliver",
    summary: "Deliver again one held or retained delivery, `<submissionId>.<destinationId>` " +
      "(even while its destination is paused)",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: emptyBody, required: false },
    answers: {
      200: {
        description: "Redelivered",
        schema: z.strictObject({ ok, redelivered: z.number().int() }),
      },
    },
    errors: [
      ...jsonBodyErrors,
      ERRORS.formNotFound,
      ERRORS.deliveryNotFound,
      ERRORS.redeliveryDisabled,
      ERRORS.redeliveryUnderWay,
      ERRORS.redeliveryGone,
      ERRORS.redeliveryNotRetained,
      ...OPERATION_429,
    ],
  },
  {
    method: "post",
    path: "/v1/admin/forms/{id}/deliveries/{deliveryId}/send-now",
    summary: "Attempt a delivery waiting for its next retry now, instead of at its next attempt",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: emptyBody, required: false },
    answers: { 200: { description: "Due now", schema: z.strictObject({ ok }) } },
    errors: [
      ...jsonBodyErrors,
      ERRORS.formNotFound,
      ERRORS.deliveryNotFound,
      ...Object.values(SEND_NOW_CONFLICTS),
    ],
  },
  {
    method: "post",
    path: "/v1/admin/forms/{id}/destinations/{destId}/send-now",
    summary: "Attempt now every delivery of the destination waiting for its next retry " +
      "(at the destination's pace), instead of at their next attempts",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: emptyBody, required: false },
    answers: {
      200: {
        description: "How many were made due now, and how many were being attempted already",
        schema: z.strictObject({ ok, sent: z.number().int(), inFlight: z.number().int() }),
      },
    },
    errors: WHOLE_DESTINATION_ERRORS,
  },
  {
    method: "get",
    path: "/v1/admin/forms/{id}/deliveries",
    summary: "Recent delivery outcomes of a form, newest first (never payloads)",
    tag: "Admin: destinations",
    admin: true,
    query: deliveriesQuerySchema,
    answers: {
      200: {
        description: "The outcomes",
        schema: z.strictObject({ ok, deliveries: z.array(outcomeSchema) }),
      },
    },
    errors: [ERRORS.validation, ...FORM_404],
  },
];
