/**
 * One delivery attempt: destination → validated config → envelope → connector →
 * classified result. The engine attempts claimed jobs through createJobAttempts; the
 * test send (routes/test_send.ts) uses checkConfig and sendEnvelope on a sample.
 * Every failure comes back as a DeliveryError, never as a throw; a job whose
 * destination is paused for health is not attempted but comes back `held`; so does one
 * whose envelope or destination config is sealed under a key this process lacks
 * (reported through onUnknownKey), until the operator gives the key back.
 *
 * @module
 */
import type { z } from "zod";
import {
  type Connector,
  DeliveryError,
  type DeliveryReceipt,
  type DeliveryRequest,
} from "../connectors/types.ts";
import type { DestinationType } from "../connectors/registry.ts";
import { describeError } from "../log.ts";
import type { Db } from "../store/db.ts";
import { type DestinationRecord, openDestinationConfig } from "../store/destinations.ts";
import { openEnvelopeData, readEnvelopeData } from "../store/envelope.ts";
import { createDestinationCache } from "../store/form_cache.ts";
import type { ClaimedJob, JobRecord } from "../store/job_record.ts";
import { sealedPart, UnknownKeyFound, unknownKeyReason } from "./unknown_key.ts";
import type { OutboundBudget } from "./outbound_budget.ts";
import { createConfirmationAttempt } from "./confirmation.ts";
import { CONFIRMATION_DESTINATION_ID } from "../rules/confirmation.ts";
import { createStallClock } from "./loop_stall.ts";

/**
 * What an attempt came to: the connector's result; held (the destination is paused); or
 * deferred until a time, nothing sent, because the organization's outbound budget is
 * spent (outbound_budget.ts).
 */
export type AttemptResult =
  | SendResult
  | { delivered: false; held: true; reason?: string }
  | { delivered: false; deferred: { until: number; reason: string } };

/**
 * What the receiver took of an attempt that reached the connector: the connector's time
 * less the event loop's stalls (loop_stall.ts) and its waits on formrelay's own limits
 * (DeliveryRequest.ownWait), and the part of the connector's time those were. The pace
 * judges the receiver by it (pace.ts signalOf).
 */
export interface ReceiverTime {
  receiverMs: number;
  ownMs: number;
}

/** What handing an envelope to a connector came to. */
export type SendResult =
  | { delivered: true; receipt: DeliveryReceipt; timing?: ReceiverTime }
  | {
    delivered: false;
    timing?: ReceiverTime;
    failure: DeliveryError;
    /**
     * The connector threw something other than a DeliveryError (a bug or an unforeseen
     * error): `failure` wraps it as transient, and its text is not known to be free of
     * secrets.
     */
    unexpected: boolean;
  };

/** A stored config checked against its type's schema. */
export type ConfigCheck =
  | { ok: true; config: unknown }
  | { ok: false; failure: DeliveryError; error: z.ZodError };

/** Checks a destination's stored config against its connector's schema (defaults applied). */
export function checkConfig(connector: Connector, stored: unknown): ConfigCheck {
  const parsed = (connector.storedConfigSchema ?? connector.configSchema).safeParse(stored);
  if (parsed.success) return { ok: true, config: parsed.data };
  const failure = new DeliveryError("Destination config is no longer valid", { permanent: true });
  return { ok: false, failure, error: parsed.error };
}

/** A failure as the attempt reports it: DeliveryErrors as they are, anything else wrapped. */
function classify(error: unknown): SendResult {
  if (error instanceof DeliveryError) {
    return { delivered: false, failure: error, unexpected: false };
  }
  const failure = new DeliveryError(`Delivery failed: ${describeError(error)}`, {
    permanent: false,
    cause: error,
  });
  return { delivered: false, failure, unexpected: true };
}

/** Hands an envelope to a connector with a validated config; every error is classified. */
export async function sendEnvelope(
  connector: Connector,
  request: DeliveryRequest<unknown>,
): Promise<SendResult> {
  try {
    return { delivered: true, receipt: await connector.deliver(request) };
  } catch (error) {
    return classify(error);
  }
}

/** How long a destination record may be cached; changes in this process apply at once. */
const DESTINATION_CACHE_MS = 1000;
/** Opened destination configs cached at most. */
const CONFIG_CACHE_MAX = 50_000;

/** Attempts at claimed jobs. */
export interface JobAttempts {
  /** Delivers a claimed job's envelope to its destination, as it is now. */
  attempt(claimed: ClaimedJob, signal: AbortSignal): Promise<AttemptResult>;
}

/**
 * Attempts at claimed jobs, with the destination records and their opened, validated
 * configs cached (most jobs share a few destinations).
 */
export function createJobAttempts(
  deps: {
    db: Db;
    connectors: Record<DestinationType, Connector>;
    /** Without it nothing is deferred. */
    outbound?: OutboundBudget;
    /** Processes delivering to a destination, this one included (DeliveryRequest.senders). */
    sendersOf?: (destinationId: string) => number;
    /** Hears a job held because what it needs is sealed under a key this process lacks. */
    onUnknownKey?: (job: JobRecord, found: UnknownKeyFound) => void;
  },
): JobAttempts {
  const { db, connectors, outbound } = deps;
  const stalls = createStallClock();
  const destinations = createDestinationCache(db, { ttlMs: DESTINATION_CACHE_MS });
  // Opened and validated configs, by destination; a changed config has a new sealed text.
  const configs = new Map<string, { sealed: string; config: unknown }>();
  // A submission's confirmation to its visitor is a job of its own (delivery/confirmation.ts).
  const confirmation = createConfirmationAttempt({
    db,
    mail: connectors.smtp.mail,
    outbound,
  });

  async function openConfig(destination: DestinationRecord, connector: Connector) {
    const cached = configs.get(destination.id);
    if (cached?.sealed === destination.sealedConfig) return cached.config;
    const checked = checkConfig(connector, await openDestinationConfig(db, destination));
    if (!checked.ok) throw checked.failure;
    if (configs.size >= CONFIG_CACHE_MAX) configs.clear();
    configs.set(destination.id, { sealed: destination.sealedConfig, config: checked.config });
    return checked.config;
  }

  async function attempt(claimed: ClaimedJob, signal: AbortSignal): Promise<AttemptResult> {
    const { job } = claimed;
    if (job.destinationId === CONFIRMATION_DESTINATION_ID) {
      return await confirmation(claimed, signal);
    }
    const destination = await destinations.get(job.formId, job.destinationId);
    if (destination === null) {
      throw new DeliveryError("Destination was deleted before delivery", { permanent: true });
    }
    if (!destination.isEnabled) {
      throw new DeliveryError("Destination was disabled before delivery", { permanent: true });
    }
    if (destination.health.state === "paused" && !job.redelivered) {
      return { delivered: false, held: true };
    }
    const data = await readEnvelopeData(db, claimed);
    if (data === null) {
      // Not the destination's fault: it says nothing about its health.
      throw new DeliveryError("Submission data expired before delivery", {
        permanent: true,
        blame: "submission",
      });
    }
    const connector = connectors[destination.type];
    const config = await sealedPart("destination", () => openConfig(destination, connector));
    if (outbound) {
      // The sealed envelope's size is the JSON's plus a few bytes: close enough, and known.
      const request = outbound.requestOf({ type: destination.type, config }, {
        orgId: job.orgId,
        bytes: data.length,
      });
      const answer = await outbound.take(request, Date.now());
      if (!answer.ok) {
        return { delivered: false, deferred: { until: answer.retryAt, reason: answer.reason } };
      }
    }
    const envelope = await sealedPart(
      "envelope",
      () => openEnvelopeData(db.sealer, job.submissionId, data),
    );
    // The receiver's time: from the hand-over to the connector to its answer, less what
    // this process kept it waiting (its busy thread, its own limits).
    const ownWait = { ms: 0 };
    const release = stalls.hold();
    const stalledBefore = stalls.read();
    const handedAt = performance.now();
    const sent = await sendEnvelope(connector, {
      envelope,
      config,
      deliveryId: `${job.submissionId}.${job.destinationId}`,
      destinationId: job.destinationId,
      signal,
      senders: deps.sendersOf?.(job.destinationId),
      ownWait,
    });
    const elapsed = performance.now() - handedAt;
    const ownMs = Math.min(elapsed, stalls.read() - stalledBefore + ownWait.ms);
    release();
    sent.timing = { receiverMs: elapsed - ownMs, ownMs };
    return sent;
  }

  /** Held, not failed: no attempt can succeed until the operator gives the key back. */
  function heldForKey(job: JobRecord, found: UnknownKeyFound): AttemptResult {
    deps.onUnknownKey?.(job, found);
    return { delivered: false, held: true, reason: unknownKeyReason(found) };
  }

  return {
    attempt: (claimed, signal) =>
      attempt(claimed, signal).catch((error) =>
        error instanceof UnknownKeyFound ? heldForKey(claimed.job, error) : classify(error)
      ),
  };
}
