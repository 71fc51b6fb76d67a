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
import { declaredLength, refuseOtherMethods } from "./http.ts";
import { bodyKind } from "../ingest/parse.ts";
import { errorPage, isBrowserFormPost, thankYouPage } from "../ingest/pages.ts";
import { createIngestPipeline } from "../ingest/pipeline.ts";
import { MAX_SUBMISSION_BYTES } from "../ingest/steps.ts";
import {
  ApiError,
  ERRORS,
  INGEST_REFUSALS,
  refusalReasonOfStatus,
  submissionTypeError,
} from "../errors.ts";
import { countRefused, openRefusalSeries } from "../metrics.ts";

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
 * counted by the pipeline). The reason is the catalogue's (errors.ts) for the
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
