import { type Context, Hono } from "hono";
import { envelopeTtlMs, sealEnvelope } from "../store/envelope.ts";
import { submissionIdAt } from "../store/submission_id.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { countAccepted, traceSubmission } from "../metrics.ts";
import type { AppDeps } from "./env.ts";
import { type FormRecord, openCaptchaSecret } from "../store/forms.ts";
import { createIngestTargets, type IngestTarget } from "../store/form_cache.ts";
import { createRateLimiter, type RateSlot } from "../store/rate_limit.ts";
import { createRefusalCounter, type RefusalReason } from "../store/refusals.ts";
import type { BodyLease } from "./body_gate.ts";
import { type CaptchaCheck, captchaRefusal, takeCaptchaToken, verifyCaptcha } from "./captcha.ts";
import { clientAddress } from "./client_address.ts";
import { ApiError, declaredLength, readBodyWithin, refuseOtherMethods } from "./http.ts";
import { bodyTimingOf } from "./env.ts";
import { type BodyKind, bodyKind, parsePayload, takeHoneypot } from "./ingest_body.ts";
import { errorPage, isBrowserFormPost, thankYouPage } from "./ingest_pages.ts";
import { ERRORS, submissionTypeError } from "./errors.ts";
import { createFormRules, dropPageToken, sentNowhere } from "./form_rules.ts";

/** Ingestion runs on Deno.serve: the connection info is the Hono environment. */
type IngestEnv = { Bindings: Partial<Deno.ServeHandlerInfo> };

/** Largest accepted submission body: 128 KB (CONTRACT). */
const MAX_SUBMISSION_BYTES = 131072;
/** Seconds a form whose organization's backlog is full is asked to wait. */
const BACKLOG_RETRY_AFTER_SECONDS = 10;
/**
 * How long a refusal for a full backlog is held before it is sent. A flood meets a full
 * backlog at once, and answered at once it is answered again and again: 26 000 refusals
 * a second from 50 connections took the thread deliveries need (they fell to 160/s).
 * Held, each connection gets one refusal a second.
 */
const BACKLOG_REFUSAL_DELAY_MS = 1_000;
/** Longest User-Agent and Referer kept in the envelope; longer ones are cut. */
export const MAX_METADATA_CHARS = 1024;

const PUBLIC_KEY = /^pk_[A-Za-z0-9_-]{16,100}$/;

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

/** What a refusal of a known form is counted as for its tenant (refusals.ts), or null. */
function refusalReason(error: ApiError): RefusalReason | null {
  switch (error.reason) {
    case "origin":
    case "captcha":
    case "captcha_unavailable":
    case "size":
    case "invalid":
      return error.reason;
    case "rate_limit":
      return "rate";
    default:
      return null;
  }
}

/** The 202 answer's note when a form has no enabled destination (counted as "nowhere"). */
export const NO_DESTINATION_WARNING =
  "This form has no enabled destination: the submission was accepted but sent nowhere";

/** The 202 answer's note when a submission matched no destination's routing conditions. */
export const UNROUTED_WARNING =
  "This submission matched no destination's conditions: it was accepted but sent nowhere";

/** How long a form's settings may be cached by ingestion (see createIngestTargets). */
const TARGET_CACHE_MS = 1000;

/** `POST /v1/f/:publicKey` and its CORS preflight (spec 4.1, CONTRACT "Ingestion"). */
export function ingestRoutes(deps: AppDeps) {
  const { config, db, writer, logger } = deps;
  const ttlMs = envelopeTtlMs(config.retryScheduleMs, config.leaseMs);
  const targets = createIngestTargets(db, { ttlMs: TARGET_CACHE_MS });
  const rateLimiter = createRateLimiter(db, config.rateLimit);
  const bodyTiming = bodyTimingOf(config);
  const refusals = deps.refusals ?? createRefusalCounter(db);
  const formRules = createFormRules(db, refusals);
  const addressRule = {
    header: config.clientIpHeader,
    trustedProxyHops: config.trustedProxyHops,
  };
  /** The enabled form behind a public key with its enabled destinations, or null. */
  async function lookUp(publicKey: string): Promise<IngestTarget | null> {
    if (!PUBLIC_KEY.test(publicKey)) return null;
    const target = await targets.get(publicKey);
    return target !== null && target.form.enabled ? target : null;
  }
  const router = new Hono<IngestEnv>();

  router.options("/:publicKey", async (c) => {
    const form = (await lookUp(c.req.param("publicKey")))?.form ?? null;
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
      if (error instanceof ApiError && seen.formId !== null) {
        const reason = refusalReason(error);
        if (reason !== null) refusals.count(seen.formId, reason);
      }
      // A person who posted a plain HTML form gets a page to read, not JSON. Headers set
      // before the throw (CORS, Retry-After) stay on the context, so the page has them too.
      if (!browserPost || !(error instanceof ApiError)) throw error;
      return c.html(errorPage(error.status, error.message), error.status);
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
    const target = await lookUp(publicKey);
    const form = target?.form ?? null;
    seen.formId = form?.id ?? null;
    const originHeader = c.req.header("origin");
    const allow = allowedOrigin(form, originOf(originHeader));
    setCorsHeaders(c, allow);

    if (declared !== null && declared > MAX_SUBMISSION_BYTES) {
      throw new ApiError(ERRORS.submissionTooLarge);
    }
    if (kind === null) throw new ApiError(submissionTypeError(config.ingestContentTypes));
    if (target === null || form === null) {
      throw new ApiError(ERRORS.formEndpointNotFound);
    }
    if (allow === null) throw new ApiError(ERRORS.originNotAllowed);
    const client = clientAddress(
      addressRule,
      addressRule.header === null ? undefined : c.req.header(addressRule.header),
      c.env?.remoteAddr,
    );
    const reserved = await rateLimiter.reserve(form.id, client.key);
    if ("retryAfter" in reserved) {
      c.header("Retry-After", String(reserved.retryAfter));
      throw new ApiError(ERRORS.rateLimited, { retryAfter: reserved.retryAfter });
    }
    let lease: BodyLease | null = null;
    try {
      lease = deps.bodyGate.admit(c, client.key, declared ?? MAX_SUBMISSION_BYTES);
      return await store(c, {
        target,
        kind,
        contentType,
        browserPost,
        ip: client.ip,
        origin: originOf(originHeader),
        reserved,
        lease,
      });
    } finally {
      lease?.release();
      reserved.release();
    }
  }

  /**
   * Reserves backlog room for a submission whose body is complete: a 202 is a promise
   * to deliver, made only while the backlog of its organization and of this process is
   * under its bound. Reserved only now, so bodies still arriving (slow ones too) hold
   * no room another organization's submissions need. Returns its release, or null
   * when the submission makes no jobs here.
   */
  async function admitJobs(
    c: Context<IngestEnv>,
    orgId: string,
    destinations: IngestTarget["destinations"],
  ): Promise<(() => void) | null> {
    let jobs = 0;
    for (const destination of destinations) if (!destination.held) jobs++;
    if (jobs === 0 || deps.engine === null) return null;
    const room = deps.engine.admission.admit(orgId, jobs);
    if (room !== null) return room;
    await new Promise((resolve) => setTimeout(resolve, BACKLOG_REFUSAL_DELAY_MS));
    c.header("Retry-After", String(BACKLOG_RETRY_AFTER_SECONDS));
    throw new ApiError(ERRORS.backlogFull, { retryAfter: BACKLOG_RETRY_AFTER_SECONDS });
  }

  /** Reads, parses and checks the body of an admitted request, and stores the submission. */
  async function store(
    c: Context<IngestEnv>,
    request: {
      target: IngestTarget;
      kind: BodyKind;
      contentType: string;
      browserPost: boolean;
      ip: string | null;
      /** The request's origin as scheme://host[:port], null when absent or not one. */
      origin: string | null;
      reserved: RateSlot;
      lease: BodyLease;
    },
  ) {
    const { target, kind, contentType, ip } = request;
    const { form } = target;
    const invalid = kind === "json" ? ERRORS.invalidJsonPayload : ERRORS.invalidFormPayload;
    const bytes = await readBodyWithin(c, {
      limit: MAX_SUBMISSION_BYTES,
      timing: bodyTiming,
      // A client that hangs up before its declared length is a bad request, not our error.
      hangUp: () => new ApiError(invalid, { detail: "The body ended before it was complete" }),
      room: request.lease,
    }).catch((error) => {
      // A body late, too slow or cut off uses the client's slot: holding a body open
      // until its deadline costs the attacker what a submission costs.
      request.reserved.count();
      throw error;
    });
    if (bytes === null) throw new ApiError(ERRORS.submissionTooLarge);
    if (bytes.length === 0) throw new ApiError(invalid, { detail: "Empty body" });
    const payload = await parsePayload(kind, bytes, {
      contentType,
      variant: config.ingestContentTypes,
    });
    const isSpam = (form.honeypotField !== null && takeHoneypot(payload, form.honeypotField)) ||
      (form.spamRules ? await formRules.caught(form, payload) : dropPageToken(payload));

    if (form.verifyCaptcha) {
      const token = takeCaptchaToken(payload, c.req.header("x-captcha-token"));
      if (token === null) throw new ApiError(ERRORS.captchaRequired);
      const secret = await openCaptchaSecret(db, form);
      const check: CaptchaCheck = secret !== null && token.length <= 10_000
        ? await verifyCaptcha(config.captchaVerifyUrl, { secret, token, remoteIp: ip })
        : { outcome: "invalid" };
      if (check.outcome !== "valid") {
        // A failed verification uses the client's slot: one that keeps failing is
        // limited like one that keeps submitting, and the provider is not called for it.
        request.reserved.count();
        const refusal = captchaRefusal(check, { logger, form, verifyUrl: config.captchaVerifyUrl });
        if (refusal.retryAfter !== null) c.header("Retry-After", String(refusal.retryAfter));
        throw refusal.error;
      }
    }

    // A bot that filled the honeypot gets the same answer as a person, and nothing is kept.
    // Routing and the confirmation (form_rules.ts) only for a form that has them.
    const destinations = isSpam
      ? []
      : target.routed || form.confirmation
      ? await formRules.destinationsOf(target, payload)
      : target.destinations;
    if (isSpam) refusals.count(form.id, "spam");
    // Accepted all the same (the visitor did nothing wrong, and a refusal would lose
    // their message too), but the tenant is told: counted, and said in the answer.
    const nowhere = !isSpam && sentNowhere(destinations);
    if (nowhere) refusals.count(form.id, "nowhere");
    const room = await admitJobs(c, form.orgId, destinations);
    try {
      const submittedAt = Date.now();
      const envelope: SubmissionEnvelope = {
        submissionId: submissionIdAt(submittedAt),
        formId: form.id,
        formName: form.name,
        payload,
        metadata: {
          origin: request.origin,
          ip,
          userAgent: c.req.header("user-agent")?.slice(0, MAX_METADATA_CHARS) ?? null,
          referer: c.req.header("referer")?.slice(0, MAX_METADATA_CHARS) ?? null,
          submittedAt: new Date(submittedAt).toISOString(),
        },
      };
      traceSubmission(envelope.submissionId);
      request.reserved.count();
      if (destinations.length > 0) {
        await storeEnvelope(envelope, { form, destinations, submittedAt });
      }
      countAccepted(form.id, isSpam);
      if (request.browserPost) {
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
    } finally {
      room?.();
    }
  }

  /** Seals and stores an accepted submission with its jobs, and wakes them. */
  async function storeEnvelope(
    envelope: SubmissionEnvelope,
    { form, destinations, submittedAt }: {
      form: FormRecord;
      destinations: IngestTarget["destinations"];
      submittedAt: number;
    },
  ) {
    let stored;
    // Counted from here, not from the start: a client slow to send its body is not load.
    deps.ingestLoad.enter(form.orgId);
    try {
      stored = await writer.write({
        submissionId: envelope.submissionId,
        formId: form.id,
        orgId: form.orgId,
        sealedEnvelope: await sealEnvelope(db.sealer, envelope),
        destinations,
        submittedAt,
        envelopeTtlMs: ttlMs,
      }, { wokenHere: deps.engine !== null });
    } catch (error) {
      logger.error("submission not stored", {
        formId: form.id,
        submissionId: envelope.submissionId,
        error: error instanceof Error ? error.message : String(error),
      });
      throw new ApiError(ERRORS.storeFailed);
    } finally {
      deps.ingestLoad.leave(form.orgId);
    }
    deps.engine?.wakeStored(stored);
  }

  refuseOtherMethods(router, "/:publicKey");
  return router;
}
