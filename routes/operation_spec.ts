/**
 * The shape of one OpenAPI operation, and the parts many routes' operations share.
 * Each routes/*.ts declares the operations it serves beside its routes;
 * routes/openapi.ts assembles them into the document.
 *
 * @module
 */
import { z } from "zod";
import { ERRORS, type ErrorSpec } from "../errors.ts";
import { rotateSecretSchema } from "../connectors/signing.ts";

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

/** `ok: true` of every success answer. */
export const ok = z.literal(true);
/** A time as answered: ISO 8601 in UTC. */
export const timestamp = z.iso.datetime();
/** An admin JSON body's refusals (routes/http.ts readJsonBody). */
export const jsonBodyErrors = [
  ERRORS.invalidJsonBody,
  ERRORS.validation,
  ERRORS.adminTooLarge,
  ERRORS.adminContentType,
  ERRORS.bodyTimeout,
];
/** A destination config is also refused when its stored form would not fit in KV. */
export const configBodyErrors = [...jsonBodyErrors, ERRORS.configTooLarge];
export const FORM_404 = [ERRORS.formNotFound];
export const DEST_404 = [ERRORS.formNotFound, ERRORS.destinationNotFound];
/** Operations that touch delivery jobs: ADMIN_OPERATIONS_PER_ORG (routes/limits.ts). */
export const OPERATION_429 = [ERRORS.tooManyOperations];

/** A signing secret rotation (an addition beyond the spec): destinations and the operational webhook. */
export function rotateSecretOperation(
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
