/**
 * Admin routes for a form's destinations: add (validated against the type's connector
 * schema), list and patch (secrets redacted, health shown), resume after a pause, delete.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { literalHostRefusal } from "../connectors/outbound_guard.ts";
import { keepStoredSecrets, secretsSet } from "../connectors/descriptor.ts";
import {
  keepPreviousSecrets,
  previousSecretValidUntil,
  rotateSecretSchema,
  rotateSigningSecret,
  type SigningSecrets,
} from "../connectors/signing.ts";
import {
  descriptorOf,
  DESCRIPTORS,
  DESTINATION_TYPES,
  type DestinationType,
} from "../connectors/registry.ts";
import type { Connector } from "../connectors/types.ts";
import type { DeliveryEngine, DestinationPace } from "../delivery/engine.ts";
import {
  addDestination,
  deleteDestination,
  type Destination,
  editDestinationConfig,
  listDestinations,
  MAX_DESTINATIONS_PER_FORM,
  TooManyDestinationsError,
  updateDestination,
} from "../store/destinations.ts";
import { redeliver } from "../store/redelivery.ts";
import { sendWaitingNow } from "../store/send_now.ts";
import { conditionsSchema } from "../rules/routing.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { requireForm } from "./forms.ts";
import {
  emptyBody,
  readEmptyBody,
  readOptionalJson,
  readValidJson,
  refuseOtherMethods,
  validate,
} from "./http.ts";
import { ApiError, ERRORS } from "../errors.ts";
import {
  configBodyErrors,
  DEST_404,
  FORM_404,
  jsonBodyErrors,
  ok,
  OPERATION_429,
  type OperationSpec,
  rotateSecretOperation,
  timestamp,
} from "./operation_spec.ts";

/** A destination's name: telling two of one type apart in the console, logs and notices. */
const destinationName = z.string().trim().min(1).max(100).meta({
  description: 'The tenant\'s name for it ("Sales inbox"), shown in the console',
});

/** Body of `POST /forms/:id/destinations`; `config` is checked by the type's connector. */
export const destinationCreateSchema = z.strictObject({
  type: z.enum(DESTINATION_TYPES),
  name: destinationName.optional(),
  config: z.unknown(),
  isEnabled: z.boolean().default(true),
  conditions: conditionsSchema.optional(),
});
/** Body of `PATCH /forms/:id/destinations/:destId`. */
export const destinationPatchSchema = z.strictObject({
  name: destinationName.nullable(),
  config: z.unknown().optional(),
  isEnabled: z.boolean(),
  conditions: conditionsSchema,
})
  .partial();

/**
 * Most bytes of a destination config as JSON. Stored sealed and in base64 inside its
 * record, it must stay under KV's 64 KiB value limit: this leaves room to spare.
 */
export const MAX_CONFIG_BYTES = 40 * 1024;

/**
 * Refuses at save a config whose URL or host is a private address this deployment will
 * not deliver to (ALLOW_PRIVATE_DESTINATIONS unset): the tenant learns it, and what allows
 * it, at once instead of at the first delivery. The type's descriptor names the hosts;
 * names are checked when delivering.
 */
function refusePrivateHosts(
  type: DestinationType,
  config: unknown,
  allowPrivate: boolean,
): void {
  const hosts = descriptorOf(type).hosts((config ?? {}) as Record<string, unknown>);
  const issues = hosts.flatMap(({ path, host }) => {
    const message = literalHostRefusal(host, allowPrivate);
    return message === null ? [] : [{ path, message }];
  });
  if (issues.length > 0) throw new ApiError(ERRORS.validation, { issues });
}

/** The config, or 413 when its stored form would not fit in KV. */
function storable<T>(config: T): T {
  if (new TextEncoder().encode(JSON.stringify(config)).length > MAX_CONFIG_BYTES) {
    throw new ApiError(ERRORS.configTooLarge);
  }
  return config;
}

/** A destination as the API shows it. */
function destinationView(
  destination: Destination,
  connector: Connector | undefined,
  options: { engine: DeliveryEngine | null; now: number },
) {
  const { engine, now } = options;
  return {
    id: destination.id,
    formId: destination.formId,
    type: destination.type,
    name: destination.name ?? null,
    config: connector ? connector.redact(destination.config) : destination.config,
    secretsSet: secretsOf(destination),
    previousSecretValidUntil: previousSecretValidUntil(destination.config as SigningSecrets, now),
    isEnabled: destination.isEnabled,
    conditions: destination.conditions ?? [],
    health: destination.health,
    pace: engine === null ? null : paceView(engine.pace(destination.id)),
    createdAt: destination.createdAt,
    updatedAt: destination.updatedAt,
  };
}

/** The secret fields a destination has stored, so a client knows signing or auth is on. */
function secretsOf(destination: Destination): string[] {
  const config = destination.config as Record<string, unknown> | null;
  return config ? secretsSet(config, descriptorOf(destination.type).secrets) : [];
}

/** A destination's pace in this process, with its hold as a time. */
function paceView(pace: DestinationPace) {
  const { concurrency, inFlight, heldUntil, ratePerSecond } = pace;
  const held = heldUntil === null ? null : new Date(heldUntil).toISOString();
  return { concurrency, inFlight, heldUntil: held, ratePerSecond };
}

/** Destinations of a form: add, list, patch, resume, delete (spec 4.3, 4.4 and the contract). */
export function destinationRoutes(
  { config: settings, db, connectors, engine, logger, now = Date.now }: AppDeps,
) {
  const allowPrivate = settings.allowPrivateDestinations;
  const view = (destination: Destination) =>
    destinationView(destination, connectors[destination.type], { engine, now: now() });
  const router = new Hono<AdminEnv>();

  /**
   * Makes a destination's held jobs due: delivered after a resume, failed (and so
   * recorded) after it was disabled or deleted. Resumed, its deliveries waiting for a
   * retry are made due too (sent at its pace). Returns how many held jobs were released.
   */
  async function releaseHeld(
    formId: string,
    destinationId: string,
    { resumed }: { resumed: boolean },
  ): Promise<number> {
    const released = await redeliver(db, {
      formId,
      destinationId,
      heldOnly: true,
      now: Date.now(),
    });
    engine?.wake(released.woken);
    if (!resumed) return released.woken.length;
    const waiting = await sendWaitingNow(db, { formId, destinationId, now: Date.now() });
    engine?.wake(waiting.sent);
    return released.woken.length;
  }

  router.post("/forms/:id/destinations", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const input = await readValidJson(c, destinationCreateSchema);
    const config = storable(
      validate(connectors[input.type].configSchema, input.config, ["config"]),
    );
    refusePrivateHosts(input.type, config, allowPrivate);
    try {
      const destination = await addDestination(db, form, { ...input, config });
      if (destination === null) throw new ApiError(ERRORS.formNotFound);
      const { id, formId, type, name, isEnabled, conditions } = destination;
      // The spec's answer: exactly the stored config, as the one who stored it sent it
      // (and the name and routing conditions, when there are any).
      const shown = {
        id,
        formId,
        type,
        ...(name ? { name } : {}),
        config,
        isEnabled,
        ...(conditions ? { conditions } : {}),
      };
      return c.json({ ok: true, destination: shown });
    } catch (error) {
      if (!(error instanceof TooManyDestinationsError)) throw error;
      throw new ApiError(ERRORS.validation, {
        issues: [{
          path: "",
          message: `A form can have at most ${MAX_DESTINATIONS_PER_FORM} destinations`,
        }],
      });
    }
  });

  router.get("/forms/:id/destinations", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const destinations = await listDestinations(db, form.id);
    return c.json({
      ok: true,
      destinations: destinations.map(view),
    });
  });

  router.patch("/forms/:id/destinations/:destId", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const patch = await readValidJson(c, destinationPatchSchema);
    const destId = c.req.param("destId");
    if (patch.config !== undefined) {
      const patchConfig = patch.config;
      // Read, checked and written in one read-check-commit: a rotation meanwhile is not undone.
      const edited = await editDestinationConfig(db, form.id, destId, (current) => {
        // Secrets the edit leaves out or sends as shown are kept (CONTRACT "Edits keep stored secrets").
        const { secrets, rotatableSecret } = descriptorOf(current.type);
        const stored = current.config as Record<string, unknown>;
        const merged = keepStoredSecrets(patchConfig, stored, secrets);
        if (merged.issues.length > 0) {
          throw new ApiError(ERRORS.validation, { issues: merged.issues });
        }
        let config = storable(
          validate(connectors[current.type].configSchema, merged.config, ["config"]),
        );
        refusePrivateHosts(current.type, config, allowPrivate);
        // An edit that keeps the signing secret keeps the earlier ones in their grace too.
        if (rotatableSecret) {
          config = keepPreviousSecrets(stored as SigningSecrets, config as SigningSecrets, now());
        }
        return { config, result: true };
      });
      if (edited === null) throw new ApiError(ERRORS.destinationNotFound);
    }
    const updated = await updateDestination(db, form.id, destId, {
      name: patch.name,
      isEnabled: patch.isEnabled,
      conditions: patch.conditions,
    });
    if (updated === null) throw new ApiError(ERRORS.destinationNotFound);
    // Enabling resumes a paused destination; disabling ends its held jobs as failed.
    if (patch.isEnabled !== undefined) {
      await releaseHeld(form.id, destId, { resumed: patch.isEnabled });
    }
    return c.json({
      ok: true,
      destination: view(updated),
    });
  });

  router.post("/forms/:id/destinations/:destId/resume", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    await readEmptyBody(c);
    const destId = c.req.param("destId");
    const resumed = await updateDestination(db, form.id, destId, { resume: true });
    if (resumed === null) throw new ApiError(ERRORS.destinationNotFound);
    const released = await releaseHeld(form.id, destId, { resumed: true });
    logger.info("destination resumed", {
      orgId: form.orgId,
      formId: form.id,
      destinationId: destId,
      released,
    });
    return c.json({
      ok: true,
      destination: view(resumed),
      released,
    });
  });

  // Addition: a new signing secret, the replaced one signing too for the grace period.
  router.post("/forms/:id/destinations/:destId/rotate-secret", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const { graceHours } = await readOptionalJson(c, rotateSecretSchema);
    const rotated = await editDestinationConfig(db, form.id, c.req.param("destId"), (current) => {
      if (!descriptorOf(current.type).rotatableSecret) {
        throw new ApiError(ERRORS.validation, {
          issues: [{
            path: "type",
            message: `A ${current.type} destination has no signing secret`,
          }],
        });
      }
      const rotation = rotateSigningSecret(current.config as SigningSecrets, {
        now: now(),
        graceMs: graceHours * 3_600_000,
      });
      return { config: rotation.config, result: rotation };
    });
    if (rotated === null) throw new ApiError(ERRORS.destinationNotFound);
    const { secret, previousValidUntil } = rotated;
    return c.json({ ok: true, secret, previousValidUntil });
  });

  router.delete("/forms/:id/destinations/:destId", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const destId = c.req.param("destId");
    if (!await deleteDestination(db, form.id, destId)) {
      throw new ApiError(ERRORS.destinationNotFound);
    }
    await releaseHeld(form.id, destId, { resumed: false });
    return c.json({ ok: true });
  });

  refuseOtherMethods(
    router,
    "/forms/:id/destinations",
    "/forms/:id/destinations/:destId",
    "/forms/:id/destinations/:destId/resume",
    "/forms/:id/destinations/:destId/rotate-secret",
  );
  return router;
}

/** The destination create body: the route's schema with `config` per type. */
const destinationCreateBody = z.discriminatedUnion(
  "type",
  DESCRIPTORS.map(({ type, docSchema }) =>
    destinationCreateSchema.extend({ type: z.literal(type), config: docSchema })
  ) as unknown as [z.ZodObject, ...z.ZodObject[]],
);

const anyConfig = z.union(DESCRIPTORS.map(({ docSchema }) => docSchema));

const destinationPatchBody = destinationPatchSchema.extend({
  config: anyConfig.optional().meta({
    description: "Replaces the whole config; validated by the destination's type. " +
      'A secret field left out or sent as shown ("********", a URL as shown, a header ' +
      'value "********") keeps the stored secret; null removes it',
  }),
});

/** A destination as list and PATCH answer it (routes/destinations.ts destinationView). */
export const destinationSchema = z.strictObject({
  id: z.uuid(),
  formId: z.uuid(),
  type: z.enum(DESTINATION_TYPES),
  name: z.string().nullable().meta({ description: "The tenant's name for it, or null" }),
  config: z.record(z.string(), z.unknown()).meta({
    description: 'The type\'s config with secret values shown as "********"',
  }),
  secretsSet: z.array(z.string()).meta({
    description: "The config's secret fields that hold a value: signing (`secret`), auth " +
      "(`password`, `authHeader`) or a token is on when its field is listed",
  }),
  previousSecretValidUntil: timestamp.nullable().meta({
    description: "Until when the signing secret a rotation replaced signs too; null: none does",
  }),
  isEnabled: z.boolean().meta({
    description: "The tenant's switch: a disabled destination gets no jobs",
  }),
  conditions: conditionsSchema.meta({
    description: "Routing: it gets only the submissions for which all hold; empty: all",
  }),
  health: z.strictObject({
    state: z.enum(["healthy", "paused"]),
    reason: z.string().nullable(),
    since: timestamp.nullable(),
  }).meta({
    description: "Paused by formrelay after failing by its own fault for " +
      "DESTINATION_PAUSE_AFTER_HOURS: its submissions are held until it is resumed",
  }),
  pace: z.strictObject({
    concurrency: z.int().meta({ description: "Deliveries it may have in flight now" }),
    inFlight: z.int().meta({ description: "Deliveries in flight to it now" }),
    heldUntil: timestamp.nullable().meta({
      description: "Nothing is sent to it before this (its Retry-After, a quota running out)",
    }),
    ratePerSecond: z.number().nullable().meta({
      description: "Deliveries a second it is kept to since it refused for rate (429), else null",
    }),
  }).nullable().meta({
    description: "Its pace as this process sees it: concurrency grows while the receiver " +
      "answers 2xx without slowing, falls on time-outs and errors, and a refusal for rate " +
      "holds and slows it. Null where this process does not deliver",
  }),
  createdAt: timestamp,
  updatedAt: timestamp,
});

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const destinationOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/forms/{id}/destinations",
    summary: "Add a destination (answers the stored config as sent)",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: destinationCreateBody, required: true },
    answers: {
      200: {
        description: "The destination",
        schema: z.strictObject({
          ok,
          destination: z.strictObject({
            id: z.uuid(),
            formId: z.uuid(),
            type: z.enum(DESTINATION_TYPES),
            name: z.string().optional(),
            config: anyConfig,
            isEnabled: z.boolean(),
            conditions: conditionsSchema.optional(),
          }),
        }),
      },
    },
    errors: [...configBodyErrors, ...FORM_404],
  },
  {
    method: "get",
    path: "/v1/admin/forms/{id}/destinations",
    summary: "List a form's destinations (secrets redacted)",
    tag: "Admin: destinations",
    admin: true,
    answers: {
      200: {
        description: "The destinations, oldest first",
        schema: z.strictObject({ ok, destinations: z.array(destinationSchema) }),
      },
    },
    errors: FORM_404,
  },
  {
    method: "patch",
    path: "/v1/admin/forms/{id}/destinations/{destId}",
    summary: "Enable, disable or reconfigure a destination (enabling also resumes a paused one)",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: destinationPatchBody, required: true },
    answers: {
      200: {
        description: "The destination (secrets redacted)",
        schema: z.strictObject({ ok, destination: destinationSchema }),
      },
    },
    errors: [...configBodyErrors, ...DEST_404, ...OPERATION_429],
  },
  {
    method: "delete",
    path: "/v1/admin/forms/{id}/destinations/{destId}",
    summary: "Delete a destination",
    tag: "Admin: destinations",
    admin: true,
    answers: { 200: { description: "Deleted", schema: z.strictObject({ ok }) } },
    errors: [...DEST_404, ...OPERATION_429],
  },
  {
    method: "post",
    path: "/v1/admin/forms/{id}/destinations/{destId}/resume",
    summary: "Resume a paused destination and deliver the submissions it holds",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: emptyBody, required: false },
    answers: {
      200: {
        description: "The destination, healthy, and how many held submissions were released",
        schema: z.strictObject({
          ok,
          destination: destinationSchema,
          released: z.number().int(),
        }),
      },
    },
    errors: [...jsonBodyErrors, ...DEST_404, ...OPERATION_429],
  },
  rotateSecretOperation(
    "/v1/admin/forms/{id}/destinations/{destId}/rotate-secret",
    "Admin: destinations",
    DEST_404,
  ),
];
