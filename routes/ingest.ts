/**
 * `POST /v1/f/:publicKey` and its CORS preflight: the HTTP around the ingestion
 * pipeline (ingest/pipeline.ts): CORS, the door's header checks (declared size, type,
 * form, origin), the page or JSON answer. And the one place where what ingestion decided
 * is counted: each refusal (a Refusal, ingest/refusal.ts) turned into the contract's
 * answer and counted in the metrics and, for a known form, for its tenant; each
 * acceptance with the spam it caught, the rules it observed, or that it went nowhere.
 *
 * A submission is answered from the plain `Request` ({@linkcode Ingestion.submit}), not
 * through Hono's context: the app hands a post to a form path straight to it (app.ts),
 * since the router's dispatch and context cost about 5 % of a submission's CPU
 * (docs/design.md, "Ingestion as named steps"). The router's POST route calls the same
 * function.
 *
 * @module
 */
import { Hono } from "hono";
import { type BodyWatch, declaredLength } from "../body_reading.ts";
import type { AppDeps } from "./app_deps.ts";
import type { FormRecord } from "../store/forms.ts";
import { isFormRefusalReason } from "../refusal_reasons.ts";
import { errorBody, ERRORS, INGEST_REFUSALS, submissionTypeError } from "../errors.ts";
import { describeError } from "../log.ts";
import { refuseOtherMethods } from "./http.ts";
import { bodyKind } from "../ingest/parse.ts";
import { errorPage, isBrowserFormPost, thankYouPage } from "../ingest/pages.ts";
import { type Accepted, createIngestPipeline } from "../ingest/pipeline.ts";
import { Refusal } from "../ingest/refusal.ts";
import { MAX_SUBMISSION_BYTES } from "../ingest/steps.ts";
import { countAccepted, countRefused, countSpamCaught, openRefusalSeries } from "../metrics.ts";
import { ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";
import type { Config } from "../config.ts";

/** What the server lends a request: its peer and the listener's watch (listener.ts). */
export type IngestConnection = (Partial<Deno.ServeHandlerInfo> & BodyWatch) | undefined;

/** Ingestion runs on Deno.serve: the connection info is the Hono environment. */
type IngestEnv = {
  Bindings: IngestConnection;
  Variables: { logIds: LogIds };
};

/** The ids the app's request line carries for a request to a known form (app.ts). */
export interface LogIds {
  orgId: string;
  formId: string;
  /** An accepted submission's: its request line is the `submission accepted` line. */
  accepted?: { submissionId: string; nowhere: boolean };
}

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

function setCorsHeaders(headers: Headers, allow: string | null) {
  if (allow === null) return;
  headers.set("Access-Control-Allow-Origin", allow);
  if (allow !== "*") headers.set("Vary", "Origin");
}

/** A JSON answer, as Hono's `c.json` writes one. */
function jsonResponse(body: unknown, status: number, headers: Headers): Response {
  headers.set("Content-Type", "application/json");
  return new Response(JSON.stringify(body), { status, headers });
}

/** A page, as Hono's `c.html` writes one. */
function htmlResponse(page: string, status: number, headers: Headers): Response {
  headers.set("Content-Type", "text/html; charset=UTF-8");
  return new Response(page, { status, headers });
}

/** Where a post to a form path (`/v1/f/:publicKey`) goes, its key; null for other paths. */
const SUBMISSION_PATH = /^https?:\/\/[^/?#]+\/v1\/f\/(pk_[A-Za-z0-9_-]+)(?:[?#]|$)/;

/**
 * The public key of a URL to a form's submission path, null for any other URL. Keys with
 * other characters (percent-encoded, say) are left to the router, which decodes them.
 */
export function submissionPathKey(url: string): string | null {
  return SUBMISSION_PATH.exec(url)?.[1] ?? null;
}

/** The ids a submission's request line carries, known once its form is. */
export interface SubmissionIds {
  logIds?: LogIds;
}

/** Ingestion's HTTP: the router (preflight, other methods) and the submission itself. */
export interface Ingestion {
  routes: Hono<IngestEnv>;
  /**
   * Answers a post to a form: the contract's answer to a refusal (a 500 for an error of
   * ours), or the 202 (303 or page for a browser form post). Sets `ids` as soon as the
   * form is known, for the request line.
   */
  submit(
    request: Request,
    info: IngestConnection,
    publicKey: string,
    ids: SubmissionIds,
  ): Promise<Response>;
}

/** The 202 answer's note when a form has no enabled destination (counted as "nowhere"). */
export const NO_DESTINATION_WARNING =
  "This form has no enabled destination: the submission was accepted but sent nowhere";

/** The 202 answer's note when a submission matched no destination's routing conditions. */
export const UNROUTED_WARNING =
  "This submission matched no destination's conditions: it was accepted but sent nowhere";

/** What a refusal is counted with: the form, once known, and the request's origin. */
interface Seen {
  formId: string | null;
  orgId: string | null;
  origin: string | null;
}
const NOT_SEEN: Seen = { formId: null, orgId: null, origin: null };

/** The request as the pipeline reads it: headers, body, peer and the listener's watch. */
function incoming(request: Request, info: IngestConnection) {
  return {
    header: (name: string) => request.headers.get(name) ?? undefined,
    body: request.body,
    remoteAddr: info?.remoteAddr,
    watch: info,
  };
}

/** `POST /v1/f/:publicKey` and its CORS preflight (spec 4.1, CONTRACT "Ingestion"). */
export function createIngestion(deps: AppDeps): Ingestion {
  const { config } = deps;
  const pipeline = createIngestPipeline(deps);
  openRefusalSeries(INGEST_REFUSALS);
  const router = new Hono<IngestEnv>();

  /**
   * Counts a refusal: in the metrics, and for its form's tenant when the form is known,
   * with the refused site for a refusal of its origin; logs it at debug with its reason.
   */
  function counted(refusal: Refusal, seen: Seen = NOT_SEEN): Refusal {
    const { status } = ERRORS[refusal.answer];
    countRefused(status, refusal.reason);
    const { formId, orgId, origin } = seen;
    deps.logger.debug("submission refused", {
      ...(formId === null ? {} : { orgId, formId }),
      reason: refusal.reason,
      status,
    });
    if (formId !== null && isFormRefusalReason(refusal.reason)) {
      deps.refusals.count(formId, refusal.reason);
      if (refusal.reason === "origin" && origin !== null) {
        deps.refusals.refusedOrigin(formId, origin);
      }
    }
    return refusal;
  }

  /**
   * Counts and logs an acceptance: spam caught, rules observed, or sent nowhere (the
   * accepted line itself is the request's, app.ts).
   */
  function countAcceptance(form: FormRecord, accepted: Accepted) {
    const { caughtBy, observed, nowhere } = accepted;
    const formId = form.id;
    const ids = { orgId: form.orgId, formId, submissionId: accepted.envelope.submissionId };
    if (observed.length > 0) deps.logger.debug("spam rules observed", { ...ids, rules: observed });
    countAccepted(formId, caughtBy !== null);
    if (caughtBy !== null) {
      deps.logger.debug("submission caught as spam", { ...ids, rule: caughtBy });
      deps.refusals.count(formId, "spam");
      if (caughtBy !== "honeypot") {
        countSpamCaught(formId, caughtBy);
        deps.refusals.count(formId, `spam:${caughtBy}`);
      }
    }
    for (const rule of observed) deps.refusals.count(formId, `observed:${rule}`);
    if (nowhere) deps.refusals.count(formId, "nowhere");
  }

  /**
   * The contract's answer to a refusal (a page for a browser form post), with `headers`
   * (CORS) and those the refusal adds.
   */
  function answer(headers: Headers, refusal: Refusal, browserPost: boolean): Response {
    const { retryAfter } = refusal;
    if (retryAfter !== undefined) headers.set("Retry-After", String(retryAfter));
    // The connection goes (the runtime closes it after this answer).
    if (refusal.closeConnection) headers.set("Connection", "close");
    const { status, text } = ERRORS[refusal.answer];
    // A person who posted a plain HTML form gets a page to read, not JSON.
    if (browserPost) {
      return htmlResponse(errorPage(status, text, retryAfter !== undefined), status, headers);
    }
    const details: Record<string, unknown> = {};
    if (refusal.detail !== undefined) details.detail = refusal.detail;
    if (retryAfter !== undefined) details.retryAfter = retryAfter;
    return jsonResponse(errorBody(text, details), status, headers);
  }

  router.options("/:publicKey", async (c) => {
    const form = (await pipeline.find(c.req.param("publicKey")))?.form ?? null;
    const origin = originOf(c.req.header("origin"));
    const allow = allowedOrigin(form, origin);
    const headers = new Headers();
    setCorsHeaders(headers, allow);
    // The refusals keep the CORS headers set above.
    if (form === null) return answer(headers, new Refusal("formEndpointNotFound"), false);
    if (allow === null) {
      // A page posting with fetch is refused here, before its POST is ever sent: this
      // is the form's refusal of that site, counted as such.
      c.set("logIds", { orgId: form.orgId, formId: form.id });
      const seen = { formId: form.id, orgId: form.orgId, origin };
      const refusal = counted(new Refusal("originNotAllowed"), seen);
      return answer(headers, refusal, false);
    }
    headers.set("Access-Control-Allow-Methods", "POST");
    headers.set("Access-Control-Allow-Headers", "Content-Type, x-captcha-token");
    headers.set("Access-Control-Max-Age", "86400");
    return new Response(null, { status: 204, headers });
  });

  async function submit(
    request: Request,
    info: IngestConnection,
    publicKey: string,
    ids: SubmissionIds,
  ): Promise<Response> {
    const contentType = request.headers.get("content-type") ?? "";
    const browserPost = isBrowserFormPost(contentType, request.headers.get("accept") ?? "");
    const headers = new Headers();
    /** The form, once known: its refusals are counted for its tenant. */
    const seen: Seen = { ...NOT_SEEN };
    try {
      return await accept(request, info, {
        publicKey,
        contentType,
        browserPost,
        seen,
        headers,
        ids,
      });
    } catch (error) {
      const refusal = error instanceof Refusal ? error : failed(error, seen);
      return answer(headers, counted(refusal, seen), browserPost);
    }
  }

  /**
   * An error of ours, not the visitor's: logged as the app logs one (app.ts), answered as
   * the contract's 500 with the request's CORS headers, so that its page can read it.
   */
  function failed(error: unknown, { formId, orgId }: Seen): Refusal {
    deps.logger.error("unhandled error", {
      method: "POST",
      path: "/v1/f/:publicKey",
      ...(formId === null ? {} : { orgId, formId }),
      error: describeError(error),
    });
    return new Refusal("internal");
  }

  router.post("/:publicKey", async (c) => {
    const ids: SubmissionIds = {};
    const response = await submit(c.req.raw, c.env, c.req.param("publicKey"), ids);
    if (ids.logIds !== undefined) c.set("logIds", ids.logIds);
    return response;
  });

  async function accept(
    request: Request,
    info: IngestConnection,
    { publicKey, contentType, browserPost, seen, headers, ids }: {
      publicKey: string;
      contentType: string;
      browserPost: boolean;
      seen: Seen;
      /** The answer's headers, CORS set here. */
      headers: Headers;
      ids: SubmissionIds;
    },
  ): Promise<Response> {
    const header = (name: string) => request.headers.get(name) ?? undefined;
    const declared = declaredLength(header("content-length"));
    const kind = bodyKind(contentType, config.ingestContentTypes);
    // Looked up before the cheaper refusals too, so that every answer carries the right CORS header.
    const target = await pipeline.find(publicKey);
    const form = target?.form ?? null;
    seen.formId = form?.id ?? null;
    seen.orgId = form?.orgId ?? null;
    if (form !== null) ids.logIds = { orgId: form.orgId, formId: form.id };
    const origin = originOf(header("origin"));
    seen.origin = origin;
    const allow = allowedOrigin(form, origin);
    setCorsHeaders(headers, allow);

    if (declared === "invalid") throw new Refusal("invalidContentLength");
    if (declared !== null && declared > MAX_SUBMISSION_BYTES) {
      throw new Refusal("submissionTooLarge");
    }
    if (kind === null) {
      throw new Refusal(
        config.ingestContentTypes === "json" ? "submissionTypeJson" : "submissionTypeAny",
      );
    }
    if (target === null || form === null) throw new Refusal("formEndpointNotFound");
    if (allow === null) throw new Refusal("originNotAllowed");

    const accepted = await pipeline.submit(incoming(request, info), {
      target,
      kind,
      contentType,
      declared,
      origin,
    });
    countAcceptance(form, accepted);
    const { envelope, nowhere } = accepted;
    if (accepted.caughtBy === null) {
      const submission = { submissionId: envelope.submissionId, nowhere };
      ids.logIds = { orgId: form.orgId, formId: form.id, accepted: submission };
    }
    if (browserPost) {
      // The thank-you page is the form's own setting, never taken from the request.
      if (form.redirectUrl !== null) {
        // As Hono's c.redirect: a header value must be bytes.
        const location = /[\u0100-\uFFFF]/.test(form.redirectUrl)
          ? encodeURI(form.redirectUrl)
          : form.redirectUrl;
        headers.set("Location", location);
        return new Response(null, { status: 303, headers });
      }
      return htmlResponse(thankYouPage(), 202, headers);
    }
    return jsonResponse(
      nowhere
        ? {
          ok: true,
          submissionId: envelope.submissionId,
          warning: target.destinations.length > 0 ? UNROUTED_WARNING : NO_DESTINATION_WARNING,
        }
        : { ok: true, submissionId: envelope.submissionId },
      202,
      headers,
    );
  }

  refuseOtherMethods(router, "/:publicKey");
  // A post to no form's path is a refusal of a submission too, counted like an unknown key.
  router.post("/*", () => answer(new Headers(), counted(new Refusal("notFound")), false));
  return { routes: router, submit };
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
  ];
}
