/**
 * The OpenAPI 3.1 description of the HTTP API, served at `GET /v1/openapi.json`.
 *
 * Request bodies and queries come from the very zod schemas the routes and connectors
 * validate with (converted by zod's own `z.toJSONSchema`), so they cannot drift from
 * the code. Answers are described by the zod schemas below, and error answers are
 * taken from the catalogue the routes throw from (errors.ts); tests/openapi_test.ts
 * checks real answers against them and that every route of the app is listed here.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import type { Config } from "../config.ts";
import { DESCRIPTORS, DESTINATION_TYPES } from "../connectors/registry.ts";
import { VERSION } from "../version.ts";
import { deliveriesQuerySchema, redeliverSinceSchema, SEND_NOW_CONFLICTS } from "./deliveries.ts";
import { destinationPreviewSchema } from "./destination_preview.ts";
import { destinationCreateSchema, destinationPatchSchema } from "./destinations.ts";
import { keyRotateSchema } from "./keys.ts";
import { rotateSecretSchema } from "../connectors/signing.ts";
import { formCreateSchema, formPatchSchema } from "./forms.ts";
import { ERRORS, type ErrorSpec, submissionTypeError } from "../errors.ts";
import { refusalsQuerySchema } from "./refusals.ts";
import {
  confirmationRequestSchema,
  notificationSentSchema,
  notificationSettingsSchema,
  notificationSettingsView,
} from "./notifications.ts";
import { FORM_REFUSAL_REASONS } from "../refusal_reasons.ts";
import { emptyBody, refuseOtherMethods } from "./http.ts";
import { conditionsSchema } from "../rules/routing.ts";
import { SPAM_RULES, spamRulesSchema, TIME_TRAP_FIELD } from "../rules/spam.ts";
import { CONFIRMATION_DESTINATION_ID, confirmationSchema } from "../rules/confirmation.ts";

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

const timestamp = z.iso.datetime();

/** Counts per spam rule (store/refusals.ts RuleCounts). */
const ruleCounts = z.strictObject(
  Object.fromEntries(SPAM_RULES.map((rule) => [rule, z.number().int()])),
);

/** One input of a console editor (connectors/descriptor.ts ConsoleField). */
const consoleFieldSchema = z.strictObject({
  name: z.string(),
  label: z.string(),
  kind: z.enum([
    "url",
    "text",
    "email",
    "number",
    "select",
    "secret",
    "headers",
    "list",
    "template",
  ]),
  help: z.string().optional(),
  options: z.array(z.string()).optional(),
  initial: z.union([z.string(), z.number()]).optional(),
  optional: z.boolean().optional(),
  generate: z.literal("whsec").optional(),
  numeric: z.boolean().optional(),
});

/** A destination type as the console renders it (connectors/registry.ts). */
const consoleDestinationTypeSchema = z.strictObject({
  type: z.enum(DESTINATION_TYPES),
  label: z.string(),
  secrets: z.array(z.string()),
  editors: z.array(z.strictObject({
    kind: z.string(),
    label: z.string(),
    where: z.string().optional(),
    fields: z.array(consoleFieldSchema),
    when: z.union([
      z.strictObject({ has: z.string() }),
      z.strictObject({ lacks: z.string() }),
    ]).optional(),
    requires: z.literal("platformRelay").optional(),
  })),
});

/** A form as the admin API answers it (routes/forms.ts formView). */
export const formSchema = z.strictObject({
  id: z.uuid(),
  name: z.string(),
  publicKey: z.string().startsWith("pk_"),
  allowedOrigins: z.array(z.string()),
  verifyCaptcha: z.boolean(),
  hasCaptchaSecret: z.boolean().meta({ description: "captchaSecret itself is write-only" }),
  enabled: z.boolean(),
  honeypotField: z.string().nullable(),
  redirectUrl: z.string().nullable(),
  spamRules: spamRulesSchema.nullable(),
  confirmation: confirmationSchema.nullable(),
  createdAt: timestamp,
  updatedAt: timestamp,
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

/** The result of a test send (routes/test_send.ts). */
export const testSendResultSchema = z.strictObject({
  delivered: z.boolean(),
  statusCode: z.number().int().nullable(),
  error: z.string().nullable(),
  detail: z.string().nullable(),
  ms: z.number(),
});

/** The contract's error body, with the exact texts one status can carry. */
function errorSchema(texts: [string, ...string[]]) {
  return z.strictObject({
    ok: z.literal(false),
    error: z.enum(texts),
    issues: z.array(z.strictObject({ path: z.string(), message: z.string() })).optional()
      .meta({ description: "With `Validation error`: each problem and the field it concerns" }),
    detail: z.string().optional(),
    retryAfter: z.number().int().optional().meta({
      description: "Seconds, with 429, 503 and the 400 of a captcha outage (also in the " +
        "Retry-After header): the refusal passes by itself",
    }),
    checks: z.record(z.string(), z.string()).optional().meta({
      description: "With `Not ready`: each failed readiness check and why",
    }),
  });
}

/** One operation of the document. */
export interface OperationSpec {
  method: "get" | "post" | "put" | "patch" | "delete" | "options";
  /** OpenAPI path (`{id}`), the Hono path with `:id` written as `{id}`. */
  path: string;
  summary: string;
  tag:
    | "Admin: keys"
    | "Admin: forms"
    | "Admin: destinations"
    | "Admin: notifications"
    | "Ingestion"
    | "Service";
  /** Needs `x-tenant-key` (adds the 401s and the 500). */
  admin?: boolean;
  query?: z.ZodObject;
  body?: { schema: z.ZodType; required: boolean };
  /** Success answers by status: a JSON schema, or a content type with no schema. */
  answers: Record<number, { description: string; schema?: z.ZodType; contentType?: string }>;
  /** Its own error answers, from the catalogue (the admin ones and the 500 are added). */
  errors: ErrorSpec[];
}

const ok = z.literal(true);
/** An admin JSON body's refusals (routes/http.ts readJsonBody). */
const jsonBodyErrors = [
  ERRORS.invalidJsonBody,
  ERRORS.validation,
  ERRORS.adminTooLarge,
  ERRORS.adminContentType,
  ERRORS.bodyTimeout,
];
/** A destination config is also refused when its stored form would not fit in KV. */
const configBodyErrors = [...jsonBodyErrors, ERRORS.configTooLarge];
const FORM_404 = [ERRORS.formNotFound];
const DEST_404 = [ERRORS.formNotFound, ERRORS.destinationNotFound];
/** Operations that touch delivery jobs: ADMIN_OPERATIONS_PER_ORG (routes/limits.ts). */
const OPERATION_429 = [ERRORS.tooManyOperations];

/** A signing secret rotation (an addition beyond the spec): destinations and the operational webhook. */
function rotateSecretOperation(
  path: string,
  tag: OperationSpec["tag"],
  errors: ErrorSpec[],
): OperationSpec {
  return {
    method: "post",
    path,
    summary: "Rotate the signing secret: the new one is shown once; the replaced one signs " +
      "too (a second v1 entry in webhook-signature) for graceHours (default 24, at most 168)",
    tag,
    admin: true,
    body: { schema: rotateSecretSchema, required: false },
    answers: {
      200: {
        description: "The new secret (not retrievable later) and until when the old one signs",
        schema: z.strictObject({
          ok,
          secret: z.string().startsWith("whsec_"),
          previousValidUntil: timestamp.nullable(),
        }),
      },
    },
    errors: [...jsonBodyErrors, ...errors],
  };
}

/** Every operation of the API, in the order the document lists them. */
export function operations(ingestContentTypes: Config["ingestContentTypes"]): OperationSpec[] {
  return [
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
    {
      method: "get",
      path: "/v1/admin/deployment",
      summary: "What this deployment offers: captcha provider, platform email relay, body types",
      tag: "Service",
      admin: true,
      answers: {
        200: {
          description: "The deployment's settings a tenant's choices depend on",
          schema: z.strictObject({
            ok,
            captcha: z.strictObject({
              id: z.enum(["hcaptcha", "turnstile", "recaptcha", "other"]),
              name: z.string(),
              verifyHost: z.string(),
            }).meta({ description: "The provider CAPTCHA_VERIFY_URL belongs to" }),
            platformRelay: z.boolean().meta({
              description: "Whether email destinations may use the platform relay (Variant B)",
            }),
            ingestContentTypes: z.enum(["any", "json"]),
            privateDestinations: z.boolean().meta({
              description: "ALLOW_PRIVATE_DESTINATIONS: loopback and private addresses allowed",
            }),
            retainsFailed: z.boolean().meta({
              description: "FAILED_RETENTION_HOURS > 0: failed deliveries can be redelivered",
            }),
            destinationTypes: z.array(consoleDestinationTypeSchema).meta({
              description: "Each destination type's name, secret fields and console editors",
            }),
          }),
        },
      },
      errors: [],
    },
    {
      method: "post",
      path: "/v1/admin/forms",
      summary: "Create a form",
      tag: "Admin: forms",
      admin: true,
      body: { schema: formCreateSchema, required: true },
      answers: {
        200: { description: "The form", schema: z.strictObject({ ok, form: formSchema }) },
      },
      errors: jsonBodyErrors,
    },
    {
      method: "get",
      path: "/v1/admin/forms",
      summary: "List the organization's forms",
      tag: "Admin: forms",
      admin: true,
      answers: {
        200: {
          description: "The forms",
          schema: z.strictObject({ ok, forms: z.array(formSchema) }),
        },
      },
      errors: [],
    },
    {
      method: "get",
      path: "/v1/admin/forms/{id}",
      summary: "Read a form",
      tag: "Admin: forms",
      admin: true,
      answers: {
        200: { description: "The form", schema: z.strictObject({ ok, form: formSchema }) },
      },
      errors: FORM_404,
    },
    {
      method: "patch",
      path: "/v1/admin/forms/{id}",
      summary: "Change some of a form's settings",
      tag: "Admin: forms",
      admin: true,
      body: { schema: formPatchSchema, required: true },
      answers: {
        200: { description: "The form", schema: z.strictObject({ ok, form: formSchema }) },
      },
      errors: [...jsonBodyErrors, ...FORM_404],
    },
    {
      method: "delete",
      path: "/v1/admin/forms/{id}",
      summary: "Delete a form and its destinations",
      tag: "Admin: forms",
      admin: true,
      answers: { 200: { description: "Deleted", schema: z.strictObject({ ok }) } },
      errors: FORM_404,
    },
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
      path: "/v1/admin/forms/{id}/destinations/preview",
      summary: "What a destination would receive for a sample submission (nothing is sent)",
      tag: "Admin: destinations",
      admin: true,
      body: { schema: destinationPreviewSchema, required: true },
      answers: {
        200: {
          description: "The sample submission and the message the destination would get",
          schema: z.strictObject({
            ok,
            sample: z.record(z.string(), z.unknown()),
            message: z.unknown().meta({
              description: "The service's message (chat types), the subject (smtp) or the envelope",
            }),
          }),
        },
      },
      errors: [...jsonBodyErrors, ...FORM_404],
    },
    {
      method: "post",
      path: "/v1/admin/forms/{id}/destinations/{destId}/test",
      summary: "Send a sample submission to the destination now and report the outcome",
      tag: "Admin: destinations",
      admin: true,
      body: { schema: emptyBody, required: false },
      answers: {
        200: {
          description: "What happened (a failed delivery is still a 200: see result.delivered)",
          schema: z.strictObject({ ok, result: testSendResultSchema }),
        },
      },
      errors: [
        ...jsonBodyErrors,
        ...DEST_404,
        ERRORS.testSendUnderWay,
        ERRORS.tooManyTestSends,
        ERRORS.outboundLimit,
      ],
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
                description:
                  "What rules in observe mode would have caught (delivered all the same)",
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
      errors: [
        ...jsonBodyErrors,
        ...DEST_404,
        ERRORS.redeliveryDisabled,
        ERRORS.redeliveryPaused,
        ...OPERATION_429,
      ],
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
    {
      method: "post",
      path: "/v1/f/{publicKey}",
      summary: "Submit to a form (public; JSON, or a browser form post)",
      tag: "Ingestion",
      body: {
        schema: z.unknown().meta({
          description: ingestContentTypes === "json"
            ? "A JSON object: the submission's payload"
            : "Any JSON value, or urlencoded / multipart form fields (no files): the payload",
        }),
        required: true,
      },
      answers: {
        202: {
          description: "Accepted and stored; delivered asynchronously",
          schema: z.strictObject({
            ok,
            submissionId: z.uuid(),
            warning: z.string().optional().meta({
              description:
                "Set when the form has no enabled destination, or the submission matched no destination's conditions: sent nowhere",
            }),
          }),
        },
        303: {
          description: "A browser form post accepted: redirect to the form's redirectUrl",
          contentType: "text/plain",
        },
      },
      // Every refusal of routes/ingest.ts, in the order of its checks.
      errors: [
        ERRORS.submissionTooLarge,
        submissionTypeError(ingestContentTypes),
        ERRORS.formEndpointNotFound,
        ERRORS.originNotAllowed,
        ERRORS.rateLimited,
        ERRORS.backlogFull,
        ERRORS.serverBusy,
        ERRORS.bodyTimeout,
        ERRORS.invalidContentLength,
        ERRORS.invalidJsonPayload,
        ERRORS.invalidFormPayload,
        ERRORS.fileUpload,
        ERRORS.captchaRequired,
        ERRORS.captchaInvalid,
        ERRORS.captchaUnavailable,
        ERRORS.storeFailed,
      ],
    },
    {
      method: "options",
      path: "/v1/f/{publicKey}",
      summary: "CORS preflight of a submission",
      tag: "Ingestion",
      answers: { 204: { description: "Allowed: CORS headers, no body" } },
      errors: [ERRORS.formEndpointNotFound, ERRORS.originNotAllowed],
    },
    {
      method: "get",
      path: "/v1/f/{publicKey}/page-token",
      summary:
        `A signed page-load time for the form's time trap (the hidden field ${TIME_TRAP_FIELD})`,
      tag: "Ingestion",
      answers: {
        200: {
          description: "The token to put in the hidden field when the page loads",
          schema: z.strictObject({ ok, token: z.string(), field: z.literal(TIME_TRAP_FIELD) }),
        },
      },
      errors: [ERRORS.formEndpointNotFound],
    },
    // Owner notifications (routes/notifications.ts).
    {
      method: "get",
      path: "/v1/admin/notifications",
      summary: "Where the organization is told of failing, paused and recovered destinations, " +
        "submissions failed for good, key rotations and summaries (docs/notifications.md)",
      tag: "Admin: notifications",
      admin: true,
      answers: {
        200: {
          description: "The settings; the webhook's URL path and secret redacted",
          schema: z.strictObject({ ok, notifications: notificationSettingsView }),
        },
      },
      errors: [],
    },
    {
      method: "put",
      path: "/v1/admin/notifications",
      summary: "Replaces the notification settings; a left-out or redacted webhook secret " +
        "and a redacted URL are kept, `secret: null` removes the secret",
      tag: "Admin: notifications",
      admin: true,
      body: { schema: notificationSettingsSchema, required: true },
      answers: {
        200: {
          description: "The settings as stored, redacted",
          schema: z.strictObject({ ok, notifications: notificationSettingsView }),
        },
      },
      errors: jsonBodyErrors,
    },
    {
      method: "post",
      path: "/v1/admin/notifications/test",
      summary: "Sends a test notification to every chosen channel now (TEST_SENDS_PER_ORG a " +
        "minute); its result shows in /notifications/sent",
      tag: "Admin: notifications",
      admin: true,
      answers: {
        200: {
          description: "How many channels it was queued to",
          schema: z.strictObject({ ok, queued: z.number().int() }),
        },
      },
      errors: [...jsonBodyErrors, ERRORS.tooManyTestSends],
    },
    rotateSecretOperation(
      "/v1/admin/notifications/webhook/rotate-secret",
      "Admin: notifications",
      [],
    ),
    {
      method: "post",
      path: "/v1/admin/notifications/email/confirmation",
      summary: "Sends a pending notification address its confirmation link again (at most " +
        "3 a day per address, a minute apart); nothing else goes to it until it is followed",
      tag: "Admin: notifications",
      admin: true,
      body: { schema: confirmationRequestSchema, required: true },
      answers: {
        200: {
          description: "Sent (or why not, in `error`)",
          schema: z.strictObject({
            ok,
            address: notificationSettingsView.shape.email.unwrap().shape.addresses.element,
          }),
        },
      },
      errors: [
        ...jsonBodyErrors,
        ERRORS.notifyAddressNotFound,
        ERRORS.addressConfirmed,
        ERRORS.tooManyConfirmations,
      ],
    },
    ...(["get", "post"] as const).map((method): OperationSpec => ({
      method,
      path: "/v1/notifications/confirm",
      summary: method === "get"
        ? "A notification address's confirmation link (`?token=`): a page with one button, " +
          "changing nothing"
        : "The button's form post (`token`, form-encoded): confirms the address",
      tag: "Service",
      ...(method === "get" ? { query: z.strictObject({ token: z.string() }) } : {}),
      answers: {
        200: { description: "The page", contentType: "text/html" },
        404: {
          description: "The link is unknown, expired, replaced or used",
          contentType: "text/html",
        },
      },
      errors: [],
    })),
    {
      method: "get",
      path: "/v1/admin/notifications/sent",
      summary: "The last 50 notifications of the past 7 days, newest first, with their result",
      tag: "Admin: notifications",
      admin: true,
      answers: {
        200: {
          description: "Sent and given-up notifications",
          schema: z.strictObject({ ok, sent: z.array(notificationSentSchema) }),
        },
      },
      errors: [],
    },
    {
      method: "get",
      path: "/healthz",
      summary: "Health: answers 200 while the KV store answers",
      tag: "Service",
      answers: { 200: { description: "Healthy", schema: z.strictObject({ ok }) } },
      errors: [ERRORS.kvNotAnswering],
    },
    {
      method: "get",
      path: "/readyz",
      summary: "Readiness: the KV takes a write, the delivery engine runs, the backlog is under " +
        "READY_MAX_BACKLOG; a 503 names each failed check in `checks`",
      tag: "Service",
      answers: {
        200: {
          description: "Ready",
          schema: z.strictObject({ ok, checks: z.record(z.string(), z.literal("ok")) }),
        },
      },
      errors: [ERRORS.notReady],
    },
    {
      method: "get",
      path: "/metrics",
      summary: "Prometheus metrics (text format); a bearer token when METRICS_TOKEN is set",
      tag: "Service",
      answers: { 200: { description: "Prometheus text format 0.0.4", contentType: "text/plain" } },
      errors: [ERRORS.invalidMetricsToken],
    },
    {
      method: "get",
      path: "/v1/openapi.json",
      summary: "This document",
      tag: "Service",
      answers: { 200: { description: "OpenAPI 3.1", contentType: "application/json" } },
      errors: [],
    },
  ];
}

/** HTML pages and their files, also served by the app (console/serve.ts). */
const PAGES: { path: string; summary: string; contentType: string }[] = [
  { path: "/", summary: "The tenant console", contentType: "text/html" },
  { path: "/console/{file}", summary: "The console's scripts and styles", contentType: "*/*" },
  { path: "/v1/docs", summary: "A reference page of this document", contentType: "text/html" },
  { path: "/v1/docs/{file}", summary: "The reference page's files", contentType: "*/*" },
];

/** A zod schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect), as sent or as answered. */
function jsonSchema(schema: z.ZodType, io: "input" | "output") {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: "any" });
  return rest;
}

/** `/v1/admin/forms/{id}` → `V1AdminFormsId`: a path as part of an operation id. */
function camelCase(path: string): string {
  return path.replace(/[^A-Za-z0-9]+(\w)?/g, (_, c = "") => c.toUpperCase());
}

function pathParameters(path: string) {
  return [...path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({
    name,
    in: "path",
    required: true,
    schema: { type: "string" },
  }));
}

const ADMIN_ERRORS = [ERRORS.missingTenantKey, ERRORS.invalidTenantKey, ERRORS.orgDisabled];

/**
 * Every answer of an operation by status: its successes, then its errors with every text
 * of each status (the tenant key's 401s for admin operations, and the 500 any route can give).
 */
export function answersOf(op: OperationSpec): OperationSpec["answers"] {
  const answers = { ...op.answers };
  const textsByStatus = new Map<number, string[]>();
  for (const error of [...(op.admin ? ADMIN_ERRORS : []), ...op.errors, ERRORS.internal]) {
    const texts = textsByStatus.get(error.status) ?? [];
    if (!texts.includes(error.text)) texts.push(error.text);
    textsByStatus.set(error.status, texts);
  }
  for (const [status, texts] of [...textsByStatus].sort(([a], [b]) => a - b)) {
    const [first, ...rest] = texts;
    answers[status] = { description: texts.join("; "), schema: errorSchema([first, ...rest]) };
  }
  return answers;
}

function operationObject(op: OperationSpec) {
  const responses: Record<string, unknown> = {};
  for (const [status, answer] of Object.entries(answersOf(op))) {
    const contentType = answer.schema ? "application/json" : answer.contentType;
    responses[status] = {
      description: answer.description,
      ...(contentType === undefined ? {} : {
        content: {
          [contentType]: answer.schema ? { schema: jsonSchema(answer.schema, "output") } : {},
        },
      }),
    };
  }
  const query = op.query
    ? Object.entries(jsonSchema(op.query, "input").properties ?? {}).map(([name, schema]) => ({
      name,
      in: "query",
      required: false,
      schema,
    }))
    : [];
  return {
    summary: op.summary,
    tags: [op.tag],
    operationId: op.method + camelCase(op.path),
    ...(op.admin ? { security: [{ tenantKey: [] }] } : {}),
    parameters: [...pathParameters(op.path), ...query],
    ...(op.body
      ? {
        requestBody: {
          required: op.body.required,
          content: { "application/json": { schema: jsonSchema(op.body.schema, "input") } },
        },
      }
      : {}),
    responses,
  };
}

/** Builds the OpenAPI 3.1 document of this deployment. */
export function openApiDocument(config: Pick<Config, "ingestContentTypes">) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of operations(config.ingestContentTypes)) {
    (paths[op.path] ??= {})[op.method] = operationObject(op);
  }
  for (const page of PAGES) {
    paths[page.path] = {
      get: {
        summary: page.summary,
        tags: ["Pages"],
        operationId: "page" + camelCase(page.path),
        parameters: pathParameters(page.path),
        responses: {
          200: { description: page.summary, content: { [page.contentType]: {} } },
          404: { description: "No such file", content: { "text/plain": {} } },
        },
      },
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "formrelay",
      version: VERSION,
      description:
        "Form submissions relayed to webhooks, spreadsheet apps and email. Every error answer " +
        `is \`{ "ok": false, "error": "<text>" }\`; an unknown path is \`404 ${ERRORS.notFound.text}\` ` +
        `and a wrong method on a known path \`405 ${ERRORS.methodNotAllowed.text}\`.`,
    },
    tags: [
      { name: "Admin: keys" },
      { name: "Admin: forms" },
      { name: "Admin: destinations" },
      { name: "Admin: notifications" },
      { name: "Ingestion" },
      { name: "Service" },
      { name: "Pages" },
    ],
    components: {
      securitySchemes: {
        tenantKey: {
          type: "apiKey",
          in: "header",
          name: "x-tenant-key",
          description: "The organization's sk_ tenant key (create-org, or a rotation)",
        },
      },
    },
    paths,
  };
}

/** `GET /v1/openapi.json`. */
export function openApiRoutes(config: Config) {
  const router = new Hono();
  const document = JSON.stringify(openApiDocument(config));
  router.get("/v1/openapi.json", (c) => {
    c.header("content-type", "application/json; charset=utf-8");
    return c.body(document);
  });
  refuseOtherMethods(router, "/v1/openapi.json");
  return router;
}
