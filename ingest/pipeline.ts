/**
 * A submission's way from an admitted request to stored, woken jobs: the steps of
 * ingest/steps.ts run in order by {@linkcode IngestPipeline.submit}. It sees the request
 * as plain data ({@linkcode IncomingRequest}), refuses with a Refusal (ingest/refusal.ts)
 * and reports what it accepted (spam caught, rules observed, sent nowhere); the HTTP
 * around it (CORS, preflight, the answers) and the counting of both are routes/ingest.ts's.
 *
 * @module
 */
import { bodyTimingOf, type BodyWatch } from "../body_reading.ts";
import { traceSubmission } from "../metrics.ts";
import type { SpamRule } from "../rules/spam.ts";
import { envelopeTtlMs } from "../store/envelope.ts";
import { createIngestTargets, type IngestTarget } from "../store/form_cache.ts";
import { isPublicKey } from "../store/sealing.ts";
import { submissionIdAt } from "../store/submission_id.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import type { BodyGate } from "./body_gate.ts";
import { createFormRules, type SpamCatcher } from "./form_rules.ts";
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

/** What ingestion is built from (the service's AppDeps has it all). */
export type IngestDeps =
  & Pick<
    IngestParts,
    "config" | "db" | "writer" | "logger" | "engine" | "ingestLoad" | "rateLimiter"
  >
  & { bodyGate: BodyGate };

/** What the pipeline reads of an HTTP request: headers, body and where it came from. */
export interface IncomingRequest {
  header(name: string): string | undefined;
  body: ReadableStream<Uint8Array<ArrayBuffer>> | null;
  remoteAddr: Deno.Addr | undefined;
  /** The listener's watch on body reads (listener.ts). */
  watch: BodyWatch | undefined;
}

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

/** An accepted submission (answered 202 whatever it is). */
export interface Accepted {
  envelope: SubmissionEnvelope;
  /** Accepted but sent to none of the form's destinations. */
  nowhere: boolean;
  /** What caught it as spam (kept nowhere), null when nothing did. */
  caughtBy: SpamCatcher | null;
  /** The rules in observe mode that would have caught it. */
  observed: SpamRule[];
}

/** Ingestion of one process: form look-ups and the submission pipeline. */
export interface IngestPipeline {
  /** The enabled form behind a public key with its enabled destinations, or null. */
  find(publicKey: string): Promise<IngestTarget | null>;
  /** Runs a request through the steps; throws the Refusal of the step that refused it. */
  submit(http: IncomingRequest, request: IngestRequest): Promise<Accepted>;
}

/** The ingestion pipeline of a service. */
export function createIngestPipeline(deps: IngestDeps): IngestPipeline {
  const { config, db } = deps;
  const parts: IngestParts = {
    config,
    db,
    writer: deps.writer,
    logger: deps.logger,
    engine: deps.engine,
    ingestLoad: deps.ingestLoad,
    rateLimiter: deps.rateLimiter,
    formRules: createFormRules(db),
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

  async function submit(http: IncomingRequest, request: IngestRequest): Promise<Accepted> {
    const { form } = request.target;
    const { client, slot } = await limitClient(parts, {
      form,
      header: addressRule.header === null ? undefined : http.header(addressRule.header),
      remoteAddr: http.remoteAddr,
    });
    let lease = null;
    try {
      lease = deps.bodyGate.admit(client.key, request.declared ?? MAX_SUBMISSION_BYTES);
      const bytes = await readSubmissionBody(parts, http, { kind: request.kind, slot, lease });
      const payload = await parseSubmission(parts, { ...request, bytes });
      const spamCheck = await checkSpam(parts, form, payload);
      let { caughtBy } = spamCheck;
      await checkCaptcha(parts, {
        form,
        payload,
        header: http.header("x-captcha-token"),
        ip: client.ip,
        slot,
      });
      const { destinations, nowhere } = await routeSubmission(parts, {
        target: request.target,
        payload,
        spam: caughtBy !== null,
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
            userAgent: http.header("user-agent"),
            referer: http.header("referer"),
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
          // Null: its page token was used before, a bot reusing one, answered as spam.
          if (stored !== null) wake(parts, stored);
          else caughtBy = "time_trap";
        }
        return { envelope, nowhere, caughtBy, observed: spamCheck.observed };
      } finally {
        room?.();
      }
    } finally {
      lease?.release();
      slot.release();
    }
  }

  return { find, submit };
}
