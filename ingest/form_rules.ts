/**
 * What a form's own rules do at acceptance, kept out of the ingestion path's way: its
 * spam rules (rules/spam.ts), routing (rules/routing.ts) and the confirmation to the
 * visitor (rules/confirmation.ts, reserved here within its limits, sent as a job of its
 * own). A form without any of them costs a property check each: no KV read, no await.
 *
 * @module
 */
import { countConfirmation, countUnrouted } from "../metrics.ts";
import { CONFIRMATION_DESTINATION_ID, mailboxOf, visitorAddress } from "../rules/confirmation.ts";
import { LaneFullError } from "../rules/patterns.ts";
import { matchingDestinations } from "../rules/routing.ts";
import {
  type PageToken,
  type SpamRule,
  spamRuleCaught,
  spamRulesCaught,
  TIME_TRAP_FIELD,
} from "../rules/spam.ts";
import { Refusal } from "./refusal.ts";
import { reserveConfirmation } from "../store/confirmations.ts";
import type { Db } from "../store/db.ts";
import type { IngestTarget } from "../store/form_cache.ts";
import type { FormRecord } from "../store/forms.ts";

/** A form's rules at acceptance. */
export interface FormRules {
  /**
   * Whether the form's spam rules catch the payload (or in observe mode would), and
   * otherwise the page token to record as used with the submission; call only when it
   * has some.
   */
  caught(form: FormRecord, payload: unknown): Promise<SpamCheck>;
  /** The routed destinations of a submission, with a confirmation job when the form has one. */
  destinationsOf(target: IngestTarget, payload: unknown): Promise<IngestTarget["destinations"]>;
}

/** What caught a submission as spam: the honeypot field or one of the form's spam rules. */
export type SpamCatcher = "honeypot" | SpamRule;

/**
 * What a form's spam checks found: what caught the submission (null: not spam), the rules
 * that in observe mode would have caught it (it goes on all the same), and the page token
 * that let it through, to record as used.
 */
export interface SpamCheck {
  caughtBy: SpamCatcher | null;
  observed: SpamRule[];
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
    throw new Refusal("serverBusy", { retryAfter: LANE_RETRY_AFTER_SECONDS });
  }
}

/** The form rules of an ingestion route. */
export function createFormRules(db: Db): FormRules {
  return {
    async caught(form, payload) {
      const rules = form.spamRules;
      if (!rules) return { caughtBy: null, observed: [], pageToken: null };
      const input = {
        payload,
        sealer: db.sealer,
        publicKey: form.publicKey,
        orgId: form.orgId,
        now: Date.now(),
      };
      // In observe mode nothing is dropped, a reused page token included: no use is
      // recorded, and every rule that would have caught it is counted, each judged alone.
      if (rules.observe) {
        const observed = await busyWhenLaneFull(spamRulesCaught(rules, input));
        return { caughtBy: null, observed, pageToken: null };
      }
      const verdict = await busyWhenLaneFull(spamRuleCaught(rules, input));
      return verdict.rule === null
        ? { caughtBy: null, observed: [], pageToken: verdict.pageToken }
        : { caughtBy: verdict.rule, observed: [], pageToken: null };
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
  return { caughtBy: null, observed: [], pageToken: null };
}

/** Whether a submission's jobs reach none of the form's destinations (a confirmation is not one). */
export function sentNowhere(destinations: IngestTarget["destinations"]): boolean {
  const confirmations = destinations.at(-1)?.id === CONFIRMATION_DESTINATION_ID ? 1 : 0;
  return destinations.length === confirmations;
}
