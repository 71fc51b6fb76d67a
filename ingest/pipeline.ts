/**
 * A submission's way from an admitted request to stored, woken jobs: the steps of
 * ingest/steps.ts run in order by {@linkcode IngestPipeline.submit}. The HTTP around it
 * (CORS, preflight, the page or JSON answer, refusal counting) is routes/ingest.ts's.
 *
 * @module
 */
import type { Context } from "hono";
import { countAccepted, countSpamCaught, traceSubmission } from "../metrics.ts";
import type { AppDeps } from "../routes/app_deps.ts";
import { bodyTimingOf } from "../routes/app_deps.ts";
import { envelopeTtlMs } from "../store/envelope.ts";
import { createIngestTargets, type IngestTarget } from "../store/form_cache.ts";
import { createRateLimiter } from "../store/rate_limit.ts";
import { isPublicKey } from "../store/sealing.ts";
import { submissionIdAt } from "../store/submission_id.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { createFormRules } from "./form_rules.ts";
import type { BodyKind } from "./parse.ts";
import {
  admitJobs,
  checkCaptcha,
  checkSpam,
  envelopeOf,
  type IngestParts,
  limitClient,
  MAX_SUBMISSION_BYTES,
  parseSubmission,
  readSubmissionBody,
  routeSubmission,
  sealAndStore,
  wake,
} from "./steps.ts";

/** How long a form's settings may be cached by ingestion (see createIngestTargets). */
const TARGET_CACHE_MS = 1000;

/** A request to an enabled form that passed the door's HTTP checks (type, size, origin). */
export interface IngestRequest {
  target: IngestTarget;
  kind: BodyKind;
  contentType: string;
  /** The declared Content-Length, null when none (a chunked body). */
  declared: number | null;
  /** The request's origin as scheme://host[:port], null when absent or not one. */
  origin: string | null;
}

/** An accepted submission. */
export interface Accepted {
  envelope: SubmissionEnvelope;
  /** Accepted but sent to none of the form's destinations. */
  nowhere: boolean;
}

/** Ingestion of one process: form look-ups and the submission pipeline. */
export interface IngestPipeline {
  /** The enabled form behind a public key with its enabled destinations, or null. */
  find(publicKey: string): Promise<IngestTarget | null>;
  /** Runs a request through the steps; throws the ApiError of the step that refused it. */
  submit(c: Context, request: IngestRequest): Promise<Accepted>;
  /** Refusals counted per form for the console. */
  refusals: IngestParts["refusals"];
}

/** The ingestion pipeline of a service. */
export function createIngestPipeline(deps: AppDeps): IngestPipeline {
  const { config, db } = deps;
  const refusals = deps.refusals;
  const parts: IngestParts = {
    config,
    db,
    writer: deps.writer,
    logger: deps.logger,
    engine: deps.engine,
    ingestLoad: deps.ingestLoad,
    refusals,
    rateLimiter: createRateLimiter(db, config.rateLimit),
    formRules: createFormRules(db, refusals),
    addressRule: { header: config.clientIpHeader, trustedProxyHops: config.trustedProxyHops },
    bodyTiming: bodyTimingOf(config),
    envelopeTtlMs: envelopeTtlMs(config.retryScheduleMs, config.leaseMs),
  };
  const targets = createIngestTargets(db, { ttlMs: TARGET_CACHE_MS });
  const { addressRule } = parts;

  async function find(publicKey: string): Promise<IngestTarget | null> {
    if (!isPublicKey(publicKey)) return null;
    const target = await targets.get(publicKey);
    return target !== null && target.form.enabled ? target : null;
  }

  async function submit(c: Context, request: IngestRequest): Promise<Accepted> {
    const { form } = request.target;
    const { client, slot } = await limitClient(parts, {
      form,
      header: addressRule.header === null ? undefined : c.req.header(addressRule.header),
      remoteAddr: (c.env as Partial<Deno.ServeHandlerInfo> | undefined)?.remoteAddr,
    });
    let lease = null;
    try {
      lease = deps.bodyGate.admit(c, client.key, request.declared ?? MAX_SUBMISSION_BYTES);
      const bytes = await readSubmissionBody(parts, c, { kind: request.kind, slot, lease });
      const payload = await parseSubmission(parts, { ...request, bytes });
      const spamCheck = await checkSpam(parts, form, payload);
      let spam = spamCheck.spam;
      await checkCaptcha(parts, {
        form,
        payload,
        header: c.req.header("x-captcha-token"),
        ip: client.ip,
        slot,
      });
      const { destinations, nowhere } = await routeSubmission(parts, {
        target: request.target,
        payload,
        spam,
      });
      const room = await admitJobs(parts, form.orgId, destinations);
      try {
        const submittedAt = Date.now();
        const envelope = envelopeOf(form, {
          submissionId: submissionIdAt(submittedAt),
          payload,
          metadata: {
            origin: request.origin,
            ip: client.ip,
            userAgent: c.req.header("user-agent"),
            referer: c.req.header("referer"),
          },
          at: submittedAt,
        });
        traceSubmission(envelope.submissionId);
        slot.count();
        if (destinations.length > 0) {
          const { pageToken } = spamCheck;
          const stored = await sealAndStore(parts, envelope, {
            form,
            destinations,
            submittedAt,
            pageToken,
          });
          if (stored !== null) wake(parts, stored);
          else {
            // Its page token was used before: a bot reusing one, answered as spam.
            spam = true;
            countSpamCaught(form.id, "time_trap");
            parts.refusals.count(form.id, "spam");
            parts.refusals.count(form.id, "spam:time_trap");
          }
        }
        countAccepted(form.id, spam);
        return { envelope, nowhere };
      } finally {
        room?.();
      }
    } finally {
      lease?.release();
      slot.release();
    }
  }

  return { find, submit, refusals: parts.refusals };
}
