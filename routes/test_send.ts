/**
 * Test send: delivers a sample submission to one destination at once and reports what
 * happened, so a tenant can check SMTP credentials or a script URL before relying on
 * them (disabled and paused destinations included). Nothing is stored: no job, outcome,
 * envelope or health. A test send is outbound traffic a tenant triggers at will, so it
 * is bounded like deliveries and more (see testSendRoutes).
 *
 * @module
 */
import { type Context, Hono } from "hono";
import { checkConfig, sendEnvelope } from "../delivery/attempt.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { describeError } from "../log.ts";
import { claimTestSend } from "../store/test_sends.ts";
import { takeTestSend } from "../store/test_send_limits.ts";
import { type Destination, getDestination } from "../store/destinations.ts";
import type { FormRecord } from "../store/forms.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { requireForm } from "./forms.ts";
import { tooManyRequests } from "./limits.ts";
import { emptyBody, readEmptyBody, refuseOtherMethods, validationIssues } from "./http.ts";
import { ApiError, ERRORS } from "../errors.ts";
import { DEST_404, jsonBodyErrors, ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";

/**
 * How long a test send's claim on its destination lasts at most: past the longest
 * conversation (SMTP's 60 s), so a claim a killed process left lapses soon after.
 */
const TEST_SEND_CLAIM_MS = 120_000;

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

/**
 * `POST /forms/:id/destinations/:destId/test`: one synchronous delivery of a sample.
 * Bounded, paused and disabled destinations alike: one at a time per destination,
 * TEST_SENDS_PER_DESTINATION and TEST_SENDS_PER_ORG a minute for the whole deployment
 * (store/test_send_limits.ts), and the outbound budget
 * (deliveries' too: outbound_budget.ts); past any, `429` with Retry-After.
 */
export function testSendRoutes(deps: AppDeps) {
  const { db, connectors, logger, config } = deps;
  const router = new Hono<AdminEnv>();
  const { outbound } = deps;
  /** Destinations with a test send under way in this process (the KV claim covers all). */
  const underWay = new Set<string>();

  /** Takes a test send's place in the limits, or answers 429; its release. */
  async function admit(c: Context<AdminEnv>, orgId: string, destinationId: string) {
    if (underWay.has(destinationId)) {
      tooManyRequests(c, ERRORS.testSendUnderWay, { retryAfterMs: 1000 });
    }
    const now = Date.now();
    // One under way per destination in every process sharing the KV.
    const release = await claimTestSend(db, destinationId, { ttlMs: TEST_SEND_CLAIM_MS, now });
    if (release === null) tooManyRequests(c, ERRORS.testSendUnderWay, { retryAfterMs: 1000 });
    // The limits of the whole deployment, in KV.
    const taken = await takeTestSend(db, orgId, [
      { scope: `destination:${destinationId}`, capacity: config.testSendLimits.perDestination },
      { scope: "sends", capacity: config.testSendLimits.perOrg },
    ], now).catch(async (error) => {
      await release();
      throw error;
    });
    if (!taken.ok) {
      await release();
      tooManyRequests(c, ERRORS.tooManyTestSends, { retryAfterMs: taken.retryAfterMs });
    }
    return release;
  }

  router.post("/forms/:id/destinations/:destId/test", async (c) => {
    const orgId = c.get("orgId");
    const form = await requireForm(db, orgId, c.req.param("id"));
    const destination = await getDestination(db, form.id, c.req.param("destId"));
    if (destination === null) throw new ApiError(ERRORS.destinationNotFound);
    await readEmptyBody(c);
    const release = await admit(c, orgId, destination.id);
    underWay.add(destination.id);
    try {
      return c.json({ ok: true, result: await testSend(c, { orgId, form, destination }) });
    } finally {
      underWay.delete(destination.id);
      await release().catch((error) =>
        logger.warn("test send claim not released", { error: describeError(error) })
      );
    }
  });

  /** Sends the sample within the outbound budget and reports what happened. */
  async function testSend(
    c: Context<AdminEnv>,
    { orgId, form, destination }: {
      orgId: string;
      form: FormRecord;
      destination: Destination;
    },
  ): Promise<TestSendResult> {
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
      const request = outbound.requestOf({ type: destination.type, config: checked.config }, {
        orgId,
        bytes: new TextEncoder().encode(JSON.stringify(envelope)).length,
      });
      const answer = await outbound.take(request, Date.now());
      if (!answer.ok) {
        tooManyRequests(c, ERRORS.outboundLimit, {
          retryAfterMs: answer.retryAt - Date.now(),
          detail: answer.reason,
        });
      }
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
            orgId: form.orgId,
            formId: form.id,
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
      orgId: form.orgId,
      formId: form.id,
      destinationId: destination.id,
      type: destination.type,
      delivered: result.delivered,
      statusCode: result.statusCode,
      error: result.error,
      ms: result.ms,
    });
    return result;
  }

  refuseOtherMethods(router, "/forms/:id/destinations/:destId/test");
  return router;
}

/** The result of a test send (routes/test_send.ts). */
export const testSendResultSchema = z.strictObject({
  delivered: z.boolean(),
  statusCode: z.number().int().nullable(),
  error: z.string().nullable(),
  detail: z.string().nullable(),
  ms: z.number(),
});

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const testSendOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/forms/{id}/destinations/{destId}/test",
    summary: "Send a sample submission to the destination now and report the outcome",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: emptyBody, required: false },
    answers: {
      200: {
        description: "What happened (a failed delivery is still a 200: see result.delivered)",
        schema: z.strictObject({ ok, result: testSendResultSchema }),
      },
    },
    errors: [
      ...jsonBodyErrors,
      ...DEST_404,
      ERRORS.testSendUnderWay,
      ERRORS.tooManyTestSends,
      ERRORS.outboundLimit,
    ],
  },
];
