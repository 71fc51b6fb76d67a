import { type Context, Hono } from "hono";
import { sealEnvelope, type SubmissionEnvelope } from "../delivery/envelope.ts";
import { envelopeTtlMs } from "../delivery/retry.ts";
import type { AppDeps } from "./env.ts";
import { type FormRecord, openCaptchaSecret } from "../store/forms.ts";
import { createIngestTargets, type IngestTarget } from "../store/form_cache.ts";
import { createRateLimiter } from "../store/rate_limit.ts";
import { verifyCaptcha } from "./captcha.ts";
import { ApiError, readCapped, refuseOtherMethods } from "./http.ts";
import { bodyKind, parsePayload, takeHoneypot, unsupportedTypeMessage } from "./ingest_body.ts";
import { errorPage, isBrowserFormPost, thankYouPage } from "./ingest_pages.ts";

/** Ingestion runs on Deno.serve: the connection info is the Hono environment. */
type IngestEnv = { Bindings: Partial<Deno.ServeHandlerInfo> };

/** Largest accepted submission body: 128 KB (CONTRACT). */
const MAX_SUBMISSION_BYTES = 131072;

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

/** How long a form's settings may be cached by ingestion (see createIngestTargets). */
const TARGET_CACHE_MS = 1000;

/** `POST /v1/f/:publicKey` and its CORS preflight (spec 4.1, CONTRACT "Ingestion"). */
export function ingestRoutes(deps: AppDeps) {
  const { config, db, writer, logger } = deps;
  const ttlMs = envelopeTtlMs(config.retryScheduleMs, config.leaseMs);
  const targets = createIngestTargets(db, { ttlMs: TARGET_CACHE_MS });
  const rateLimiter = createRateLimiter(db, config.rateLimit);
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
    if (form === null) throw new ApiError(404, "Form endpoint not found or disabled");
    if (allow === null) throw new ApiError(403, "Origin is not allowed for this form");
    c.header("Access-Control-Allow-Methods", "POST");
    c.header("Access-Control-Allow-Headers", "Content-Type, x-captcha-token");
    c.header("Access-Control-Max-Age", "86400");
    return c.body(null, 204);
  });

  router.post("/:publicKey", async (c) => {
    const contentType = c.req.header("content-type") ?? "";
    const browserPost = isBrowserFormPost(contentType, c.req.header("accept") ?? "");
    try {
      return await accept(c, c.req.param("publicKey"), contentType, browserPost);
    } catch (error) {
      // A person who posted a plain HTML form gets a page to read, not JSON. Headers set
      // before the throw (CORS, Retry-After) stay on the context, so the page has them too.
      if (!browserPost || !(error instanceof ApiError)) throw error;
      return c.html(errorPage(error.status, error.message), error.status);
    }
  });

  async function accept(
    c: Context<IngestEnv>,
    publicKey: string,
    contentType: string,
    browserPost: boolean,
  ) {
    const lengthHeader = c.req.header("content-length");
    const declaredLength = lengthHeader === undefined ? null : Number(lengthHeader);
    const kind = bodyKind(contentType, config.ingestContentTypes);
    // Looked up before the cheaper refusals too, so that every answer carries the right CORS header.
    const target = await lookUp(publicKey);
    const form = target?.form ?? null;
    const originHeader = c.req.header("origin");
    const allow = allowedOrigin(form, originOf(originHeader));
    setCorsHeaders(c, allow);

    if (declaredLength !== null && declaredLength > MAX_SUBMISSION_BYTES) {
      throw new ApiError(413, "Payload too large (max 128KB)");
    }
    if (kind === null) throw new ApiError(415, unsupportedTypeMessage(config.ingestContentTypes));
    if (target === null || form === null) {
      throw new ApiError(404, "Form endpoint not found or disabled");
    }
    if (allow === null) throw new ApiError(403, "Origin is not allowed for this form");
    const ip = clientIp(c, config.clientIpHeader);
    const retryAfter = await rateLimiter.check(form.id, ip);
    if (retryAfter !== null) {
      c.header("Retry-After", String(retryAfter));
      throw new ApiError(429, "Too many submissions", { retryAfter });
    }
    const invalid = kind === "json" ? "Invalid JSON payload" : "Invalid form payload";
    // A client that hangs up before its declared length is a bad request, not our error.
    const bytes = await readBody(c.req.raw, declaredLength).catch(() => {
      throw new ApiError(400, invalid, { detail: "The body ended before it was complete" });
    });
    if (bytes === null) throw new ApiError(413, "Payload too large (max 128KB)");
    if (bytes.length === 0) throw new ApiError(400, invalid, { detail: "Empty body" });
    const payload = await parsePayload(kind, bytes, {
      contentType,
      variant: config.ingestContentTypes,
    });
    const isSpam = form.honeypotField !== null && takeHoneypot(payload, form.honeypotField);

    if (form.verifyCaptcha) {
      const token = c.req.header("x-captcha-token");
      if (!token) throw new ApiError(400, "Captcha token is required");
      const secret = await openCaptchaSecret(db, form);
      const valid = secret !== null && token.length <= 10_000 &&
        await verifyCaptcha(config.captchaVerifyUrl, { secret, token, remoteIp: ip });
      if (!valid) throw new ApiError(400, "Invalid captcha token");
    }

    const submittedAt = Date.now();
    const envelope: SubmissionEnvelope = {
      submissionId: crypto.randomUUID(),
      formId: form.id,
      formName: form.name,
      payload,
      metadata: {
        origin: originHeader ?? null,
        ip,
        userAgent: c.req.header("user-agent") ?? null,
        referer: c.req.header("referer") ?? null,
        submittedAt: new Date(submittedAt).toISOString(),
      },
    };
    rateLimiter.hit(form.id, ip);
    // A bot that filled the honeypot gets the same answer as a person, and nothing is kept.
    const destinations = isSpam ? [] : target.destinations;
    if (destinations.length > 0) {
      let stored;
      // Counted from here, not from the start: a client slow to send its body is not load.
      deps.ingestLoad.enter();
      try {
        stored = await writer.write({
          submissionId: envelope.submissionId,
          formId: form.id,
          orgId: form.orgId,
          sealedEnvelope: await sealEnvelope(db.sealer, envelope),
          destinations,
          submittedAt,
          envelopeTtlMs: ttlMs,
        });
      } catch (error) {
        logger.error("submission not stored", {
          formId: form.id,
          submissionId: envelope.submissionId,
          error: error instanceof Error ? error.message : String(error),
        });
        throw new ApiError(503, "Submission could not be stored: try again");
      } finally {
        deps.ingestLoad.leave();
      }
      deps.engine?.wakeStored(stored);
    }
    if (browserPost) {
      // The thank-you page is the form's own setting, never taken from the request.
      if (form.redirectUrl !== null) return c.redirect(form.redirectUrl, 303);
      return c.html(thankYouPage(), 202);
    }
    return c.json({ ok: true, submissionId: envelope.submissionId }, 202);
  }

  refuseOtherMethods(router, "/:publicKey");
  return router;
}

/**
 * The body, at most MAX_SUBMISSION_BYTES; null when it is longer. With a declared
 * length the server delivers no more than that, so the body is read whole (the fast
 * path); without one (chunked) it is read as a stream and cut off at the cap. The
 * length comes from the caller: asking the request whether it has the header would
 * build its whole header list.
 */
async function readBody(
  request: Request,
  declaredLength: number | null,
): Promise<Uint8Array<ArrayBuffer> | null> {
  if (declaredLength !== null && declaredLength <= MAX_SUBMISSION_BYTES) {
    const bytes = new Uint8Array(await request.arrayBuffer());
    return bytes.length > MAX_SUBMISSION_BYTES ? null : bytes;
  }
  return await readCapped(request.body, MAX_SUBMISSION_BYTES);
}

/** The submitter's IP: the configured edge header, else the connection's address. */
function clientIp(
  c: Context<IngestEnv>,
  header: string | null,
): string | null {
  const forwarded = header === null ? undefined : c.req.header(header);
  if (forwarded) return forwarded.split(",", 1)[0].trim().slice(0, 100) || null;
  const addr = c.env?.remoteAddr;
  return addr && "hostname" in addr ? addr.hostname : null;
}
