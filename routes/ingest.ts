/**
 * `POST /v1/f/:publicKey` and its CORS preflight: the HTTP around the ingestion
 * pipeline (ingest/pipeline.ts): CORS, the door's header checks (declared size, type,
 * form, origin), the page or JSON answer, and the form's refusals counted for its tenant.
 *
 * @module
 */
import { type Context, Hono } from "hono";
import type { AppDeps } from "./app_deps.ts";
import type { FormRecord } from "../store/forms.ts";
import { isFormRefusalReason } from "../refusal_reasons.ts";
import { ApiError, declaredLength, refuseOtherMethods } from "./http.ts";
import { bodyKind } from "../ingest/parse.ts";
import { errorPage, isBrowserFormPost, thankYouPage } from "../ingest/pages.ts";
import { createIngestPipeline } from "../ingest/pipeline.ts";
import { MAX_SUBMISSION_BYTES } from "../ingest/steps.ts";
import { ERRORS, INGEST_REFUSALS, refusalReasonOfStatus, submissionTypeError } from "./errors.ts";
import { countRefused, openRefusalSeries } from "../metrics.ts";
import { ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";
import { TIME_TRAP_FIELD } from "../rules/spam.ts";
import type { Config } from "../config.ts";

/** Ingestion runs on Deno.serve: the connection info is the Hono environment. */
type IngestEnv = { Bindings: Partial<Deno.ServeHandlerInfo> };

/** Origin of a URL or Origin header, or null when it is not one. */
function originOf(value: string | undefined): string | null {
  if (!value || value === "null") return null;
  try {
    return new URL(value).origin;
  } catch {
    return null;
  }
}

/**
 * The allow-origin decision for a request to a form: "*" for an empty allow-list, the
 * request's origin when it is listed, null (no header, 403 on POST) otherwise.
 */
function allowedOrigin(form: FormRecord | null, origin: string | null): string | null {
  if (form === null || form.allowedOrigins.length === 0) return "*";
  return origin !== null && form.allowedOrigins.includes(origin) ? origin : null;
}

function setCorsHeaders(c: Context, allow: string | null) {
  if (allow === null) return;
  c.header("Access-Control-Allow-Origin", allow);
  if (allow !== "*") c.header("Vary", "Origin");
}

/** The 202 answer's note when a form has no enabled destination (counted as "nowhere"). */
export const NO_DESTINATION_WARNING =
  "This form has no enabled destination: the submission was accepted but sent nowhere";

/** The 202 answer's note when a submission matched no destination's routing conditions. */
export const UNROUTED_WARNING =
  "This submission matched no destination's conditions: it was accepted but sent nowhere";

/**
 * Counts a refusal of `POST /v1/f/:publicKey` in the metrics (called by the app for every
 * request; anything else, and every answer below 400, returns at once: acceptances are
 * counted by the pipeline). The reason is the catalogue's (routes/errors.ts) for the
 * error thrown; an answer without one (a browser form post's error page, an unknown
 * path) takes the first reason of its status.
 */
export function countIngestAnswer(c: Context): void {
  const status = c.res.status;
  if (status < 400 || c.req.method !== "POST" || !c.req.path.startsWith("/v1/f/")) return;
  const reason = c.error instanceof ApiError ? c.error.reason : undefined;
  countRefused(status, reason ?? refusalReasonOfStatus(status) ?? "other");
}

/** `POST /v1/f/:publicKey` and its CORS preflight (spec 4.1, CONTRACT "Ingestion"). */
export function ingestRoutes(deps: AppDeps) {
  const { config } = deps;
  const pipeline = createIngestPipeline(deps);
  openRefusalSeries(INGEST_REFUSALS);
  const router = new Hono<IngestEnv>();

  router.options("/:publicKey", async (c) => {
    const form = (await pipeline.find(c.req.param("publicKey")))?.form ?? null;
    const allow = allowedOrigin(form, originOf(c.req.header("origin")));
    setCorsHeaders(c, allow);
    // Thrown, the error keeps the CORS headers set above (app.onError answers on this context).
    if (form === null) throw new ApiError(ERRORS.formEndpointNotFound);
    if (allow === null) throw new ApiError(ERRORS.originNotAllowed);
    c.header("Access-Control-Allow-Methods", "POST");
    c.header("Access-Control-Allow-Headers", "Content-Type, x-captcha-token");
    c.header("Access-Control-Max-Age", "86400");
    return c.body(null, 204);
  });

  router.post("/:publicKey", async (c) => {
    const contentType = c.req.header("content-type") ?? "";
    const browserPost = isBrowserFormPost(contentType, c.req.header("accept") ?? "");
    /** The form, once known: its refusals are counted for its tenant. */
    const seen: { formId: string | null } = { formId: null };
    try {
      return await accept(c, {
        publicKey: c.req.param("publicKey"),
        contentType,
        browserPost,
        seen,
      });
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      if (seen.formId !== null) {
        // A known form's refusals its tenant should see (refusal_reasons.ts) are counted for it.
        const { reason } = error;
        if (reason !== undefined && isFormRefusalReason(reason)) {
          pipeline.refusals.count(seen.formId, reason);
        }
      }
      const retryAfter = error.details.retryAfter;
      if (typeof retryAfter === "number") c.header("Retry-After", String(retryAfter));
      // A person who posted a plain HTML form gets a page to read, not JSON. Headers set
      // before the throw (CORS, Retry-After) stay on the context, so the page has them too.
      if (!browserPost) throw error;
      return c.html(
        errorPage(error.status, error.message, typeof retryAfter === "number"),
        error.status,
      );
    }
  });

  async function accept(
    c: Context<IngestEnv>,
    { publicKey, contentType, browserPost, seen }: {
      publicKey: string;
      contentType: string;
      browserPost: boolean;
      seen: { formId: string | null };
    },
  ) {
    const declared = declaredLength(c);
    const kind = bodyKind(contentType, config.ingestContentTypes);
    // Looked up before the cheaper refusals too, so that every answer carries the right CORS header.
    const target = await pipeline.find(publicKey);
    const form = target?.form ?? null;
    seen.formId = form?.id ?? null;
    const origin = originOf(c.req.header("origin"));
    const allow = allowedOrigin(form, origin);
    setCorsHeaders(c, allow);

    if (declared !== null && declared > MAX_SUBMISSION_BYTES) {
      throw new ApiError(ERRORS.submissionTooLarge);
    }
    if (kind === null) throw new ApiError(submissionTypeError(config.ingestContentTypes));
    if (target === null || form === null) throw new ApiError(ERRORS.formEndpointNotFound);
    if (allow === null) throw new ApiError(ERRORS.originNotAllowed);

    const { envelope, nowhere } = await pipeline.submit(c, {
      target,
      kind,
      contentType,
      declared,
      origin,
    });
    if (browserPost) {
      // The thank-you page is the form's own setting, never taken from the request.
      if (form.redirectUrl !== null) return c.redirect(form.redirectUrl, 303);
      return c.html(thankYouPage(), 202);
    }
    return c.json(
      nowhere
        ? {
          ok: true,
          submissionId: envelope.submissionId,
          warning: target.destinations.length > 0 ? UNROUTED_WARNING : NO_DESTINATION_WARNING,
        }
        : { ok: true, submissionId: envelope.submissionId },
      202,
    );
  }

  refuseOtherMethods(router, "/:publicKey");
  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export function ingestOperations(
  ingestContentTypes: Config["ingestContentTypes"],
): OperationSpec[] {
  return [
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
  ];
}
