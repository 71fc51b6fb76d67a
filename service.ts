/**
 * A running formrelay: opens the store (KV, sealer), builds the connectors, the
 * delivery engine (with the destination health hook) and the app, and closes them in
 * order.
 *
 * @module
 */
import { redactUrls } from "./redact.ts";
import type { Hono } from "hono";
import { createApp } from "./app.ts";
import { type Config, isRemoteKvPath } from "./config.ts";
import { createConnectors } from "./connectors/mod.ts";
import { type DeliveryEngine, startDeliveryEngine } from "./delivery/engine.ts";
import { createIngestLoad } from "./delivery/ingest_load.ts";
import { unknownKeyReason } from "./delivery/unknown_key.ts";
import { createOutboundBudget } from "./delivery/outbound_budget.ts";
import { type BodyGate, createBodyGate } from "./ingest/body_gate.ts";
import { createLogger, describeError, type Logger } from "./log.ts";
import { closeDb, type Db, openDb } from "./store/db.ts";
import { recordHealthChange } from "./store/destination_health.ts";
import { countSealedUnknownKey, observeService } from "./metrics.ts";
import { sendWaitingNow } from "./store/send_now.ts";
import { createBacklogReader } from "./store/backlog.ts";
import { createSealer, loadSealingKey } from "./store/sealing.ts";
import { createSubmissionWriter } from "./store/submissions.ts";
import { createRefusalCounter } from "./store/refusals.ts";
import { createRateLimiter } from "./store/rate_limit.ts";
import { type Notifier, startNotifier } from "./notify/mod.ts";

/** A running formrelay: its app, store and delivery engine. */
export interface Service {
  app: Hono;
  db: Db;
  engine: DeliveryEngine | null;
  /** The budget of request bodies being read and processed. */
  bodyGate: BodyGate;
  logger: Logger;
  /** Owner notifications of this process. */
  notifier: Notifier;
  /** Stops delivering, closes connectors and the KV. */
  close(): Promise<void>;
}

/** Whether the KV at this path offers queues: KV Connect and the platform KV on Deploy do not. */
export function kvHasQueues(kvPath: string | undefined): boolean {
  return kvPath !== undefined && !isRemoteKvPath(kvPath);
}

/** Opens the KV, builds the app and starts delivering. */
export async function startService(
  config: Config,
  options: {
    deliver?: boolean;
    logger?: Logger;
    caCerts?: string[];
    /** Overrides queue detection, e.g. to run as on a KV without queues. */
    queues?: boolean;
    /** The clock of secret rotations and tenant key expiry (tests move it). */
    now?: () => number;
  } = {},
): Promise<Service> {
  const logger = options.logger ?? createLogger(config.logLevel);
  if (config.kvPath && config.kvPath !== ":memory:" && !isRemoteKvPath(config.kvPath)) {
    const dir = config.kvPath.includes("/")
      ? config.kvPath.slice(0, config.kvPath.lastIndexOf("/"))
      : ".";
    await Deno.mkdir(dir, { recursive: true });
  }
  const sealingKey = await loadSealingKey(config.submissionEncryptionKey, config.kvPath);
  const queues = options.queues ?? (config.kvQueues && kvHasQueues(config.kvPath));
  const earlierKeys = config.submissionEncryptionKeysPrevious.map((key) =>
    Uint8Array.fromBase64(key)
  );
  const db = await openDb(config.kvPath, await createSealer(sealingKey, earlierKeys), { queues });
  const connectors = createConnectors(config, { caCerts: options.caCerts });
  // One budget for deliveries and test sends alike.
  const outbound = createOutboundBudget(db, config);
  const ingestLoad = createIngestLoad();
  // Destinations this process found healthy: their deliveries skip the health read.
  const healthyDestinations = new Map<string, number>();
  // Owner notifications: events recorded by every process; turned into notice jobs by
  // the processes that deliver, whose engine sends them (delivery/notice.ts).
  let engine: DeliveryEngine | null = null;
  const notifier = startNotifier({
    db,
    config,
    logger,
    background: options.deliver !== false,
    wakeNotices: (refs) => engine?.wakeNotices(refs),
  });
  /**
   * Makes a recovered destination's deliveries waiting for a retry due now (woken here;
   * the dispatcher sends them at the destination's pace). Not awaited: the attempt that
   * found the recovery has its own slot to give back.
   */
  function bringForward(job: { orgId: string; formId: string; destinationId: string }) {
    const { orgId, formId, destinationId } = job;
    sendWaitingNow(db, { formId, destinationId, now: Date.now() }).then(({ sent }) => {
      engine?.wake(sent);
      logger.info("destination recovered: its waiting deliveries brought forward", {
        orgId,
        formId,
        destinationId,
        deliveries: sent.length,
      });
    }).catch((error) =>
      logger.error("bringing a recovered destination's deliveries forward failed", {
        orgId,
        formId,
        destinationId,
        error: describeError(error),
      })
    );
  }
  engine = options.deliver === false ? null : startDeliveryEngine({
    db,
    connectors,
    config,
    logger,
    queues,
    outbound,
    ingestBurstMs: ingestLoad.burstMs,
    // Every attempt tells its destination's health (the failing record, one per
    // destination); failing by its own fault for DESTINATION_PAUSE_AFTER_HOURS pauses it
    // (0: never). The outcome is already recorded, so a failure here is logged, not the
    // delivery's. Owner notifications hear what the attempt changed.
    onAttempt: async (job, result) => {
      const change = await recordHealthChange(
        db,
        job,
        result.delivered ? { delivered: true } : {
          delivered: false,
          blame: result.failure.blame,
          error: result.failure.message,
          statusCode: result.failure.statusCode ?? null,
          gone: result.failure.gone,
        },
        { pauseAfterMs: config.pauseAfterMs, now: Date.now(), clear: healthyDestinations },
      ).then((change) => {
        if (change.paused && !result.delivered) {
          logger.warn("destination paused", {
            orgId: job.orgId,
            formId: job.formId,
            destinationId: job.destinationId,
            // Cut down to scheme://host once more: a URL path may be the credential.
            reason: result.failure.gone
              ? `the service says it no longer exists: ${redactUrls(result.failure.message)}`
              : `failing by its own fault for ${
                config.pauseAfterMs / 3_600_000
              } h; last error: ${result.failure.message}`,
          });
        }
        // Recovered: its other deliveries waiting for a retry go now, at its pace.
        if (result.delivered && change.cleared !== null) bringForward(job);
        return change;
      }).catch((error) => {
        logger.error("destination health update failed", {
          orgId: job.orgId,
          formId: job.formId,
          destinationId: job.destinationId,
          error: describeError(error),
        });
        return null;
      });
      if (change === null) return;
      await notifier.afterAttempt(job, change).catch((error) =>
        logger.error("notification hook failed", {
          orgId: job.orgId,
          formId: job.formId,
          destinationId: job.destinationId,
          error: describeError(error),
        })
      );
    },
    onFailed: (job) => notifier.onFailed(job),
    // A value under a key this process lacks: logged (its id only), counted, the job held
    // (delivery/unknown_key.ts) and the owner told through the notifier, grouped per destination.
    onUnknownKey: (job, found) => {
      countSealedUnknownKey(found.value);
      logger.error("sealed data under a key not configured: delivery held", {
        orgId: job.orgId,
        formId: job.formId,
        destinationId: job.destinationId,
        submissionId: job.submissionId,
        keyId: found.keyId ?? "no id",
        what: found.value,
      });
      notifier.record({
        orgId: job.orgId,
        type: "message.attempt.failing",
        subject: job.destinationId,
        formId: job.formId,
        destinationId: job.destinationId,
        detail: unknownKeyReason(found),
        submissionIds: [job.submissionId],
      }).catch((error) =>
        logger.error("notification hook failed", {
          orgId: job.orgId,
          destinationId: job.destinationId,
          error: describeError(error),
        })
      );
    },
  });
  // Counted by the other processes before admitting anything (store/rate_limit.ts).
  await engine?.registered;
  const writer = createSubmissionWriter(db, { retainMs: config.failedRetentionMs });
  const bodyGate = createBodyGate(config.http);
  let delivering = engine !== null;
  const backlog = createBacklogReader(db, { limit: config.readyMaxBacklog });
  const observed = { backlog, delivering: () => delivering };
  observeService({
    ...observed,
    engine: () => engine?.stats() ?? null,
    paces: () => engine?.paces() ?? [],
    bodies: bodyGate.stats,
  }, {
    perForm: config.metrics.perForm,
  });
  const refusals = createRefusalCounter(db);
  // The engine's process id: its process record and its rate-limit mark are one process's.
  const rateLimiter = createRateLimiter(db, {
    ...config.rateLimit,
    processId: engine?.processId,
  });
  const app = createApp({
    refusals,
    rateLimiter,
    config,
    db,
    connectors,
    logger,
    writer,
    engine,
    ingestLoad,
    bodyGate,
    outbound,
    notifier,
    ...observed,
    now: options.now,
  });
  return {
    app,
    db,
    engine,
    bodyGate,
    logger,
    notifier,
    async close() {
      delivering = false;
      await refusals.flush();
      await rateLimiter.flush();
      await engine?.close();
      await notifier.close();
      connectors.close();
      closeDb(db);
      await engine?.listening;
    },
  };
}
