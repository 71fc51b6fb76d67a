/**
 * `GET /v1/f/:publicKey/page-token`: the time trap's page token (rules/spam.ts).
 *
 * @module
 */
import { Hono } from "hono";
import { ApiError, ERRORS } from "../errors.ts";
import { pageToken, TIME_TRAP_FIELD } from "../rules/spam.ts";
import type { Db } from "../store/db.ts";
import { isPublicKey } from "../store/sealing.ts";
import { refuseOtherMethods } from "./http.ts";
import { ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";

/**
 * `GET /v1/f/:publicKey/page-token`: a signed page-load time for the time trap
 * (rules/spam.ts). The page's script asks for it when it loads and puts it in the
 * hidden field `_formrelay_loaded`. No KV read: the token only signs the time and the
 * key, so anyone may have one; what it proves is when it was asked for.
 */
export function pageTokenRoutes(db: Db) {
  const router = new Hono();
  router.get("/:publicKey/page-token", (c) => {
    const publicKey = c.req.param("publicKey");
    if (!isPublicKey(publicKey)) {
      throw new ApiError(ERRORS.formEndpointNotFound);
    }
    c.header("Access-Control-Allow-Origin", "*");
    c.header("Cache-Control", "no-store");
    return c.json({
      ok: true,
      token: pageToken(db.sealer, publicKey, Date.now()),
      field: TIME_TRAP_FIELD,
    });
  });
  refuseOtherMethods(router, "/:publicKey/page-token");
  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const pageTokenOperations: OperationSpec[] = [
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
];
