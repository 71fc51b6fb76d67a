/**
 * Test send: delivers a sample submission to one destination at once and reports what
 * happened, so a tenant can check SMTP credentials or a script URL before relying on
 * them (disabled destinations included). Nothing is stored: no job, outcome or envelope.
 *
 * @module
 */
import { Hono } from "hono";
import { checkConfig, sendEnvelope } from "../delivery/attempt.ts";
import type { SubmissionEnvelope } from "../delivery/envelope.ts";
import { describeError } from "../log.ts";
import { getDestination } from "../store/destinations.ts";
import type { FormRecord } from "../store/forms.ts";
import type { AdminEnv, AppDeps } from "./env.ts";
import { requireForm } from "./forms.ts";
import { ApiError, readEmptyBody, refuseOtherMethods, validationIssues } from "./http.ts";
import { ERRORS } from "./errors.ts";

/** The payload of every test submission. */
const TEST_PAYLOAD = {
  test: true,
  message: "This is a test submission from formrelay",
} as const;

/** What a test send reports. */
interface TestSendResult {
  delivered: boolean;
  statusCode: number | null;
  /** The failure text (as in delivery outcomes: no secrets, no payload), or null. */
  error: string | null;
  /** The connector's note on success (e.g. rejected SMTP recipients), or null. */
  detail: string | null;
  /** Duration of the attempt in milliseconds. */
  ms: number;
}

/** The sample envelope of a test send: a fresh submission id and the form's id and name. */
function testEnvelope(form: Pick<FormRecord, "id" | "name">): SubmissionEnvelope {
  return {
    submissionId: crypto.randomUUID(),
    formId: form.id,
    formName: form.name,
    payload: { ...TEST_PAYLOAD },
    metadata: {
      origin: null,
      ip: null,
      userAgent: null,
      referer: null,
      submittedAt: new Date().toISOString(),
    },
  };
}

/** `POST /forms/:id/destinations/:destId/test`: one synchronous delivery of a sample. */
export function testSendRoutes({ db, connectors, logger }: AppDeps) {
  const router = new Hono<AdminEnv>();

  router.post("/forms/:id/destinations/:destId/test", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const destination = await getDestination(db, form.id, c.req.param("destId"));
    if (destination === null) throw new ApiError(ERRORS.destinationNotFound);
    await readEmptyBody(c);

    const connector = connectors[destination.type];
    const envelope = testEnvelope(form);
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    let result: TestSendResult;
    const checked = checkConfig(connector, destination.config);
    if (!checked.ok) {
      // As the delivery engine does, with the issues (paths and rules, never values).
      const detail = validationIssues(checked.error, ["config"])
        .map((issue) => `${issue.path}: ${issue.message}`).join("; ");
      result = {
        delivered: false,
        statusCode: null,
        error: checked.failure.message,
        detail,
        ms: elapsed(),
      };
    } else {
      const attempt = await sendEnvelope(connector, {
        envelope,
        config: checked.config,
        deliveryId: `${envelope.submissionId}.${destination.id}`,
        destinationId: destination.id,
        // Not the request's signal: reading it makes Deno.serve print a plain-text warning
        // into the JSON log (its legacy abort). The connector's own time-out bounds a test.
        signal: new AbortController().signal,
      });
      if (attempt.delivered) {
        result = {
          delivered: true,
          statusCode: attempt.receipt.statusCode ?? null,
          error: null,
          detail: attempt.receipt.detail ?? null,
          ms: elapsed(),
        };
      } else {
        if (attempt.unexpected) {
          // Its text is not known to be free of secrets, so only the log has it.
          logger.error("test send failed", {
            destinationId: destination.id,
            error: describeError(attempt.failure.cause),
          });
        }
        result = {
          delivered: false,
          statusCode: attempt.failure.statusCode ?? null,
          error: attempt.unexpected ? "Delivery failed: internal error" : attempt.failure.message,
          detail: null,
          ms: elapsed(),
        };
      }
    }
    logger.info("test send", {
      formId: form.id,
      destinationId: destination.id,
      type: destination.type,
      delivered: result.delivered,
      statusCode: result.statusCode,
      error: result.error,
      ms: result.ms,
    });
    return c.json({ ok: true, result });
  });

  refuseOtherMethods(router, "/forms/:id/destinations/:destId/test");
  return router;
}
