/**
 * `GET /deployment`: what this deployment offers, so that clients (the console) offer
 * only what can work: the captcha provider tokens are verified with, whether the
 * platform email relay is configured, which submission bodies are taken, and each
 * destination type's editor (connectors/registry.ts).
 *
 * @module
 */
import { Hono } from "hono";
import { consoleDestinationTypes, DESTINATION_TYPES } from "../connectors/registry.ts";
import { captchaProviderOf } from "../ingest/captcha.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { refuseOtherMethods } from "./http.ts";
import { ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";

/** The answer of `GET /deployment` for a configuration. */
export function deploymentView(config: AppDeps["config"]) {
  return {
    captcha: captchaProviderOf(config.captchaVerifyUrl),
    platformRelay: config.platformSmtp !== null,
    ingestContentTypes: config.ingestContentTypes,
    privateDestinations: config.allowPrivateDestinations,
    /** Whether failed deliveries are kept for redelivery (FAILED_RETENTION_HOURS > 0). */
    retainsFailed: config.failedRetentionMs > 0,
    /** Each destination type's name, secret fields and editors: the console renders from them. */
    destinationTypes: consoleDestinationTypes(),
  };
}

/** `GET /deployment` (an admin route: the tenant's view of the deployment's settings). */
export function deploymentRoutes({ config }: AppDeps) {
  const router = new Hono<AdminEnv>();
  const view = deploymentView(config);
  router.get("/deployment", (c) => c.json({ ok: true, ...view }));
  refuseOtherMethods(router, "/deployment");
  return router;
}

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

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const deploymentOperations: OperationSpec[] = [
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
];
