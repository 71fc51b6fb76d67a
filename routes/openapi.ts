/**
 * The OpenAPI 3.1 description of the HTTP API, served at `GET /v1/openapi.json`.
 *
 * Each routes/*.ts declares the operations it serves beside its routes (their shape in
 * routes/operation_spec.ts); this module assembles them. Request bodies and queries come
 * from the very zod schemas the routes and connectors validate with (converted by zod's
 * own `z.toJSONSchema`), so they cannot drift from the code. Answers are described by zod
 * schemas beside the routes, and error answers are taken from the catalogue the routes
 * throw from (errors.ts); tests/openapi_test.ts checks real answers against them
 * and that every route of the app is listed here.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import type { Config } from "../config.ts";
import { VERSION } from "../version.ts";
import { deliveryOperations } from "./deliveries.ts";
import { deploymentOperations } from "./deployment.ts";
import { destinationPreviewOperations } from "./destination_preview.ts";
import { destinationOperations } from "./destinations.ts";
import { ERRORS } from "../errors.ts";
import { formOperations } from "./forms.ts";
import { refuseOtherMethods } from "./http.ts";
import { ingestOperations } from "./ingest.ts";
import { keyOperations } from "./keys.ts";
import { notificationOperations } from "./notifications.ts";
import { notifyConfirmOperations } from "./notify_confirm.ts";
import { observeOperations } from "./observe.ts";
import { pageTokenOperations } from "./page_token.ts";
import type { OperationSpec } from "./operation_spec.ts";
import { refusalOperations } from "./refusals.ts";
import { testSendOperations } from "./test_send.ts";

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

/** Every operation of the API, in the order the document lists them. */
export function operations(ingestContentTypes: Config["ingestContentTypes"]): OperationSpec[] {
  return [
    ...keyOperations,
    ...deploymentOperations,
    ...formOperations,
    ...destinationOperations,
    ...destinationPreviewOperations,
    ...testSendOperations,
    ...refusalOperations,
    ...deliveryOperations,
    ...ingestOperations(ingestContentTypes),
    ...pageTokenOperations,
    ...notificationOperations,
    ...notifyConfirmOperations,
    ...observeOperations,
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
