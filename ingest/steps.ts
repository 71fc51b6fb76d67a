/**
 * The steps of a submission's way in, in the order ingest/pipeline.ts runs them:
 *
 * 1. {@linkcode limitClient}: who the client is (ingest/client_address.ts) and its rate slot.
 * 2. {@linkcode readSubmissionBody}: the body, within its deadline and the body budget.
 * 3. {@linkcode parseSubmission}: the payload, from JSON, urlencoded or multipart.
 * 4. {@linkcode checkSpam}: the honeypot and the form's spam rules.
 * 5. {@linkcode checkCaptcha}: the captcha token, verified with the form's provider.
 * 6. {@linkcode routeSubmission}: the destinations it goes to (routing, confirmation).
 * 7. {@linkcode admitJobs}: room in the backlog for its jobs.
 * 8. {@linkcode sealAndStore}: the sealed envelope and its jobs, in one KV commit.
 * 9. {@linkcode wake}: the stored jobs handed to this process's delivery engine.
 *
 * Each step is a plain function of {@linkcode IngestParts} and what the steps before it
 * produced, so it can be read, tested and profiled alone. A step that refuses the
 * submission throws a {@linkcode Refusal} (ingest/refusal.ts): the route answers and
 * counts it. Nothing here knows HTTP's framework.
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { DeliveryEngine } from "../delivery/engine.ts";
import type { FreshSubmission } from "../delivery/claim_hints.ts";
import type { IngestLoad } from "../delivery/ingest_load.ts";
import type { Logger } from "../log.ts";
import { type BodyTiming, type BodyWatch, readBodyWithin } from "../body_reading.ts";
import type { Db } from "../store/db.ts";
import { sealEnvelope } from "../store/envelope.ts";
import type { IngestTarget } from "../store/form_cache.ts";
import { type FormRecord, openCaptchaSecret } from "../store/forms.ts";
import type { RateLimiter, RateSlot } from "../store/rate_limit.ts";
import { PageTokenUsedError, type SubmissionWriter } from "../store/submissions.ts";
import type { PageToken } from "../rules/spam.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import type { BodyLease } from "./body_gate.ts";
import { type CaptchaCheck, captchaRefusal, takeCaptchaToken, verifyCaptcha } from "./captcha.ts";
import { type ClientAddress, clientAddress, type ClientAddressRule } from "./client_address.ts";
import { dropPageToken, type FormRules, sentNowhere, type SpamCheck } from "./form_rules.ts";
import { Refusal, type RefusalAnswer } from "./refusal.ts";
import { type BodyKind, parsePayload, takeHoneypot } from "./parse.ts";

/** Largest accepted submission body: 128 KB (CONTRACT). */
export const MAX_SUBMISSION_BYTES = 131072;
/** Longest User-Agent and Referer kept in the envelope; longer ones are cut. */
export const MAX_METADATA_CHARS = 1024;
/** Seconds a form whose organization's backlog is full is asked to wait. */
const BACKLOG_RETRY_AFTER_SECONDS = 10;
/**
 * How long a submission that finds the backlog full waits for room before it is
 * refused. A spike is absorbed at the pace deliveries free room; and a flood that
 * outlasts it gets one refusal a second per connection: answered at once, its refusals
 * would take the thread deliveries need (docs/delivery.md).
 */
const BACKLOG_WAIT_MS = 1_000;

/** What the steps are built from: the parts of the service ingestion uses, made once. */
export interface IngestParts {
  config: Config;
  db: Db;
  writer: SubmissionWriter;
  logger: Logger;
  /** Null where this process only accepts and another one delivers. */
  engine: DeliveryEngine | null;
  ingestLoad: IngestLoad;
  rateLimiter: RateLimiter;
  formRules: FormRules;
  /** Where the client's address is read from (config.clientIpHeader, trustedProxyHops). */
  addressRule: ClientAddressRule;
  bodyTiming: BodyTiming;
  /** How long a stored envelope is kept (store/envelope.ts envelopeTtlMs). */
  envelopeTtlMs: number;
}

/** The client of a request and its reserved rate slot. */
export interface LimitedClient {
  client: ClientAddress;
  slot: RateSlot;
}

/**
 * Step 1: the client's address (from the trusted proxy header or the connection) and a
 * slot of the form's rate limit for it; throws `429` with `retryAfter` when the
 * client's slots are taken.
 */
export async function limitClient(
  parts: Pick<IngestParts, "addressRule" | "rateLimiter">,
  request: { form: FormRecord; header: string | undefined; remoteAddr: Deno.Addr | undefined },
): Promise<LimitedClient> {
  const client = clientAddress(parts.addressRule, request.header, request.remoteAddr);
  const reserved = await parts.rateLimiter.reserve(request.form.id, client.key);
  if ("retryAfter" in reserved) {
    throw new Refusal("rateLimited", { retryAfter: reserved.retryAfter });
  }
  return { client, slot: reserved };
}

/** The refusal of an invalid payload of a body kind. */
function invalidPayload(kind: BodyKind): RefusalAnswer {
  return kind === "json" ? "invalidJsonPayload" : "invalidFormPayload";
}

/**
 * Step 2: the request's body of at most 128 KB, read within the body deadline and the
 * room `lease` holds in the body budget. A body late, too slow or cut off uses the
 * client's slot: holding a body open until its deadline costs an attacker what a
 * submission costs. Throws `413` for a longer body, `408` for a late one.
 */
export async function readSubmissionBody(
  parts: Pick<IngestParts, "bodyTiming">,
  source: { body: ReadableStream<Uint8Array<ArrayBuffer>> | null; watch?: BodyWatch },
  request: { kind: BodyKind; slot: RateSlot; lease: BodyLease },
): Promise<Uint8Array<ArrayBuffer>> {
  const read = await readBodyWithin(source, {
    limit: MAX_SUBMISSION_BYTES,
    timing: parts.bodyTiming,
    room: request.lease,
  });
  if (read === "too_large") throw new Refusal("submissionTooLarge");
  if (typeof read !== "string") return read;
  request.slot.count();
  // A late body's connection goes, which also ends the read still pending. A client that
  // hangs up before its declared length is a bad request, not our error.
  if (read === "late") throw new Refusal("bodyTimeout", { closeConnection: true });
  throw new Refusal(invalidPayload(request.kind), {
    detail: "The body ended before it was complete",
  });
}

/** Step 3: the payload of a complete body; throws `400` for an empty or malformed one. */
export async function parseSubmission(
  parts: Pick<IngestParts, "config">,
  body: { kind: BodyKind; bytes: Uint8Array<ArrayBuffer>; contentType: string },
): Promise<unknown> {
  if (body.bytes.length === 0) {
    throw new Refusal(invalidPayload(body.kind), { detail: "Empty body" });
  }
  return await parsePayload(body.kind, body.bytes, {
    contentType: body.contentType,
    variant: parts.config.ingestContentTypes,
  });
}

/**
 * Step 4: whether the submission is spam: its honeypot field filled, or caught by the
 * form's spam rules (and, in observe mode, which rules would have caught it). Takes the honeypot field and the time trap's
 * token out of the payload either way: they are the page's, never the visitor's.
 */
export async function checkSpam(
  parts: Pick<IngestParts, "formRules">,
  form: FormRecord,
  payload: unknown,
): Promise<SpamCheck> {
  if (form.honeypotField !== null && takeHoneypot(payload, form.honeypotField)) {
    return { caughtBy: "honeypot", observed: [], pageToken: null };
  }
  return form.spamRules ? await parts.formRules.caught(form, payload) : dropPageToken(payload);
}

/**
 * Step 5: for a form that verifies a captcha, its token (from the payload or the
 * `x-captcha-token` header) verified with the provider; throws `400` when it is missing
 * or invalid, and when the provider cannot be reached (then with `detail` and
 * `retryAfter`). A failed verification uses the client's slot: one that keeps failing is
 * limited like one that keeps submitting, and the provider is not called for it.
 */
export async function checkCaptcha(
  parts: Pick<IngestParts, "config" | "db" | "logger">,
  request: {
    form: FormRecord;
    payload: unknown;
    header: string | undefined;
    ip: string | null;
    slot: RateSlot;
  },
): Promise<void> {
  const { form } = request;
  if (!form.verifyCaptcha) return;
  const token = takeCaptchaToken(request.payload, request.header);
  if (token === null) throw new Refusal("captchaRequired");
  const secret = await openCaptchaSecret(parts.db, form);
  const verifyUrl = parts.config.captchaVerifyUrl;
  const check: CaptchaCheck = secret !== null && token.length <= 10_000
    ? await verifyCaptcha(verifyUrl, { secret, token, remoteIp: request.ip })
    : { outcome: "invalid" };
  if (check.outcome === "valid") return;
  request.slot.count();
  // 400 either way; a provider that cannot be reached is logged and counted apart, and its
  // answer asks the visitor to try again (captcha.ts).
  throw captchaRefusal(check, { logger: parts.logger, form, verifyUrl });
}

/** Where a submission goes. */
export interface Routed {
  /** The destinations it makes jobs for (none for spam). */
  destinations: IngestTarget["destinations"];
  /** Accepted but sent to none of the form's destinations (counted as "nowhere"). */
  nowhere: boolean;
}

/**
 * Step 6: the destinations of a submission: none for spam (a bot that filled the
 * honeypot gets the same answer as a person, and nothing is kept), the routed ones
 * with a confirmation job for a form that has routing or a confirmation, else all
 * the form's enabled destinations. A submission sent nowhere is accepted all the same
 * (the visitor did nothing wrong), and the route counts it for the tenant.
 */
export async function routeSubmission(
  parts: Pick<IngestParts, "formRules">,
  request: { target: IngestTarget; payload: unknown; spam: boolean },
): Promise<Routed> {
  const { target, spam } = request;
  if (spam) return { destinations: [], nowhere: false };
  const destinations = target.routed || target.form.confirmation
    ? await parts.formRules.destinationsOf(target, request.payload)
    : target.destinations;
  return { destinations, nowhere: sentNowhere(destinations) };
}

/**
 * Step 7: backlog room for a submission's jobs: a 202 is a promise to deliver, made
 * only while the backlog of its organization and of this process is under its bound.
 * Reserved only once the body is complete, so bodies still arriving (slow ones too)
 * hold no room another organization's submissions need. Returns its release, or null
 * when the submission makes no jobs here. A full backlog is waited on for room a moment
 * (BACKLOG_WAIT_MS); throws `503` with `retryAfter` when none came.
 */
export async function admitJobs(
  parts: Pick<IngestParts, "engine">,
  orgId: string,
  destinations: IngestTarget["destinations"],
): Promise<(() => void) | null> {
  let jobs = 0;
  for (const destination of destinations) if (!destination.held) jobs++;
  if (jobs === 0 || parts.engine === null) return null;
  const room = await parts.engine.admission.waitForRoom(orgId, jobs, BACKLOG_WAIT_MS);
  if (room !== null) return room;
  throw new Refusal("backlogFull", { retryAfter: BACKLOG_RETRY_AFTER_SECONDS });
}

/** What an envelope records of the request besides the payload. */
export interface RequestMetadata {
  /** The request's origin as scheme://host[:port], null when absent or not one. */
  origin: string | null;
  ip: string | null;
  userAgent: string | undefined;
  referer: string | undefined;
}

/** The envelope of an accepted submission: its id, form, payload and request metadata. */
export function envelopeOf(
  form: Pick<FormRecord, "id" | "name">,
  submission: { submissionId: string; payload: unknown; metadata: RequestMetadata; at: number },
): SubmissionEnvelope {
  const { metadata } = submission;
  return {
    submissionId: submission.submissionId,
    formId: form.id,
    formName: form.name,
    payload: submission.payload,
    metadata: {
      origin: metadata.origin,
      ip: metadata.ip,
      userAgent: metadata.userAgent?.slice(0, MAX_METADATA_CHARS) ?? null,
      referer: metadata.referer?.slice(0, MAX_METADATA_CHARS) ?? null,
      submittedAt: new Date(submission.at).toISOString(),
    },
  };
}

/**
 * Step 8: the envelope sealed and stored with a job per destination in one commit, with
 * the use of its time-trap page token (rules/spam.ts). Null, nothing stored, when that
 * token was used before: a bot reusing one. Throws `503` (logged without the payload)
 * when the commit fails.
 */
export async function sealAndStore(
  parts: Pick<IngestParts, "db" | "writer" | "logger" | "ingestLoad" | "engine" | "envelopeTtlMs">,
  envelope: SubmissionEnvelope,
  { form, destinations, submittedAt, pageToken }: {
    form: FormRecord;
    destinations: IngestTarget["destinations"];
    submittedAt: number;
    pageToken: PageToken | null;
  },
): Promise<FreshSubmission | null> {
  // Counted from here, not from the start: a client slow to send its body is not load.
  parts.ingestLoad.enter(form.orgId);
  try {
    const { sealed, json } = await sealEnvelope(parts.db.sealer, envelope);
    const { jobs } = await parts.writer.write({
      submissionId: envelope.submissionId,
      formId: form.id,
      orgId: form.orgId,
      sealedEnvelope: sealed,
      destinations,
      submittedAt,
      envelopeTtlMs: parts.envelopeTtlMs,
      pageToken: pageToken?.signature,
    }, { wokenHere: parts.engine !== null });
    return { jobs, envelopeJson: json };
  } catch (error) {
    if (error instanceof PageTokenUsedError) return null;
    parts.logger.error("submission not stored", {
      orgId: form.orgId,
      formId: form.id,
      submissionId: envelope.submissionId,
      error: error instanceof Error ? error.message : String(error),
    });
    throw new Refusal("storeFailed");
  } finally {
    parts.ingestLoad.leave(form.orgId);
  }
}

/** Step 9: the stored jobs handed to this process's delivery engine, if it has one. */
export function wake(parts: Pick<IngestParts, "engine">, stored: FreshSubmission): void {
  parts.engine?.wakeStored(stored);
}
