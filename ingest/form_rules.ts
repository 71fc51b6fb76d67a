/**
 * What a form's own rules do at acceptance, kept out of the ingestion path's way: its
 * spam rules (rules/spam.ts), routing (rules/routing.ts) and the confirmation to the
 * visitor (rules/confirmation.ts, reserved here within its limits, sent as a job of its
 * own). A form without any of them costs a property check each: no KV read, no await.
 *
 * @module
 */
import { countConfirmation, countSpamCaught, countUnrouted } from "../metrics.ts";
import { CONFIRMATION_DESTINATION_ID, mailboxOf, visitorAddress } from "../rules/confirmation.ts";
import { LaneFullError } from "../rules/patterns.ts";
import { matchingDestinations } from "../rules/routing.ts";
import { type PageToken, pageToken, spamRuleCaught, TIME_TRAP_FIELD } from "../rules/spam.ts";
import { Hono } from "hono";
import { ApiError, refuseOtherMethods } from "../routes/http.ts";
import { ERRORS } from "../routes/errors.ts";
import { reserveConfirmation } from "../store/confirmations.ts";
import type { Db } from "../store/db.ts";
import type { RefusalCounter } from "../store/refusals.ts";
import type { IngestTarget } from "../store/form_cache.ts";
import type { FormRecord } from "../store/forms.ts";

/** A form's rules at acceptance. */
export interface FormRules {
  /**
   * Whether the form's spam rules catch the payload (counted per rule), and otherwise the
   * page token to record as used with the submission; call only when it has some.
   */
  caught(form: FormRecord, payload: unknown): Promise<SpamCheck>;
  /** The routed destinations of a submission, with a confirmation job when the form has one. */
  destinationsOf(target: IngestTarget, payload: unknown): Promise<IngestTarget["destinations"]>;
}

/** What a form's spam rules found: spam, or the page token that let the submission through. */
export interface SpamCheck {
  spam: boolean;
  pageToken: PageToken | null;
}

/** Seconds a submission refused for its organization's full matching lane is asked to wait. */
const LANE_RETRY_AFTER_SECONDS = 1;
/**
 * How long that refusal is held before it is sent. Answered at once, a flood's clients
 * post again at once, and the thread goes to reading and parsing their bodies only to
 * refuse them, at other organizations' expense (docs/design.md, "Figures behind the
 * code's limits"). Held, each connection gets one refusal a second, as for a full backlog.
 */
const LANE_REFUSAL_DELAY_MS = 1_000;

/**
 * `503 Server busy` (with `retryAfter`; the route sets the header) when the organization's
 * matching lane is full (rules/patterns.ts): its flood is refused, not held in the lane.
 */
async function busyWhenLaneFull<T>(matching: Promise<T>): Promise<T> {
  try {
    return await matching;
  } catch (error) {
    if (!(error instanceof LaneFullError)) throw error;
    await new Promise((resolve) => setTimeout(resolve, LANE_REFUSAL_DELAY_MS));
    throw new ApiError(ERRORS.serverBusy, { retryAfter: LANE_RETRY_AFTER_SECONDS });
  }
}

/**
 * The form rules of an ingestion route; `refusals` counts each rule's catches per form
 * and day (and in observe mode, what it would have caught, while the submission goes on).
 */
export function createFormRules(db: Db, refusals: RefusalCounter): FormRules {
  return {
    async caught(form, payload) {
      if (!form.spamRules) return { spam: false, pageToken: null };
      const verdict = await busyWhenLaneFull(spamRuleCaught(form.spamRules, {
        payload,
        sealer: db.sealer,
        publicKey: form.publicKey,
        orgId: form.orgId,
        now: Date.now(),
      }));
      const { rule } = verdict;
      // In observe mode nothing is dropped, a reused page token included: no use is recorded.
      if (rule === null) {
        return { spam: false, pageToken: form.spamRules.observe ? null : verdict.pageToken };
      }
      if (form.spamRules.observe) {
        refusals.count(form.id, `observed:${rule}`);
        return { spam: false, pageToken: null };
      }
      countSpamCaught(form.id, rule);
      refusals.count(form.id, `spam:${rule}`);
      return { spam: true, pageToken: null };
    },

    async destinationsOf(target, payload) {
      const routed = await busyWhenLaneFull(
        matchingDestinations(target, { payload, orgId: target.form.orgId }),
      );
      if (target.routed && routed.length === 0) countUnrouted(target.form.id);
      const settings = target.form.confirmation;
      if (!settings) return routed;
      const address = visitorAddress(payload, settings.emailField);
      if (address === null) {
        countConfirmation("no_address");
        return routed;
      }
      const reserved = await reserveConfirmation(db, {
        formId: target.form.id,
        mailbox: mailboxOf(address),
        maxPerHour: settings.maxPerHour,
        now: Date.now(),
      });
      countConfirmation(reserved === "reserved" ? "queued" : reserved);
      if (reserved !== "reserved") return routed;
      return [...routed, { id: CONFIRMATION_DESTINATION_ID, type: "smtp", held: false }];
    },
  };
}

/**
 * Takes the time trap's field out of a payload of a form without spam rules (a page may
 * carry it all the same: it is the page's, never the visitor's). Not spam.
 */
export function dropPageToken(payload: unknown): SpamCheck {
  if (typeof payload === "object" && payload !== null) {
    delete (payload as Record<string, unknown>)[TIME_TRAP_FIELD];
  }
  return { spam: false, pageToken: null };
}

/** Whether a submission's jobs reach none of the form's destinations (a confirmation is not one). */
export function sentNowhere(destinations: IngestTarget["destinations"]): boolean {
  const confirmations = destinations.at(-1)?.id === CONFIRMATION_DESTINATION_ID ? 1 : 0;
  return destinations.length === confirmations;
}

/**
 * `GET /v1/f/:publicKey/page-token`: a signed page-load time for the time trap
 * (rules/spam.ts). The page's script asks for it when it loads and puts it in the
 * hidden field `_formrelay_loaded`. No KV read: the token only signs the time and the
 * key, so anyone may have one; what it proves is when it was asked for.
 */
export function pageTokenRoutes(db: Db) {
  const router = new Hono();
  router.get("/:publicKey/page-token", (c) => {
    const publicKey = c.req.param("publicKey");
    if (!/^pk_[A-Za-z0-9_-]{16,100}$/.test(publicKey)) {
      throw new ApiError(ERRORS.formEndpointNotFound);
    }
    c.header("Access-Control-Allow-Origin", "*");
    c.header("Cache-Control", "no-store");
    return c.json({
      ok: true,
      token: pageToken(db.sealer, publicKey, Date.now()),
      field: TIME_TRAP_FIELD,
    });
  });
  refuseOtherMethods(router, "/:publicKey/page-token");
  return router;
}
