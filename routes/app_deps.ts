/**
 * What the routes are built from (AppDeps) and the admin routes' Hono environment.
 *
 * @module
 */
import type { Config } from "../config.ts";
import type { BodyGate } from "../ingest/body_gate.ts";
import type { BodyTiming } from "../body_reading.ts";
import type { Connector } from "../connectors/types.ts";
import type { DeliveryEngine } from "../delivery/engine.ts";
import type { IngestLoad } from "../delivery/ingest_load.ts";
import type { OutboundBudget } from "../delivery/outbound_budget.ts";
import type { Logger } from "../log.ts";
import type { Notifier } from "../notify/mod.ts";
import type { BacklogReader } from "../store/backlog.ts";
import type { Db } from "../store/db.ts";
import type { DestinationType } from "../connectors/registry.ts";
import type { RateLimiter } from "../store/rate_limit.ts";
import type { RefusalCounter } from "../store/refusals.ts";
import type { SubmissionWriter } from "../store/submissions.ts";

/** What the routes are built from. */
export interface AppDeps {
  config: Config;
  db: Db;
  connectors: Record<DestinationType, Connector>;
  logger: Logger;
  writer: SubmissionWriter;
  /** Null where this process only accepts and another one delivers. */
  engine: DeliveryEngine | null;
  /** Submissions being accepted now; under a burst the engine gives way (EngineDeps). */
  ingestLoad: IngestLoad;
  /** The budget of request bodies being read and processed at once. */
  bodyGate: BodyGate;
  /** Organizations' outbound budgets, shared with the delivery engine. */
  outbound: OutboundBudget;
  /** The backlog `/metrics` and `/readyz` read. */
  backlog: BacklogReader;
  /** Refusals counted per form: by ingestion, for the console. */
  refusals: RefusalCounter;
  /** The visitor rate limit; the service flushes its counts when it stops. */
  rateLimiter: RateLimiter;
  /** Owner notifications (notify/); without it no event is recorded. */
  notifier?: Notifier;
  /** Whether this process's delivery engine runs (it stops before the process does). */
  delivering: () => boolean;
  /** The clock of secret rotations and tenant key expiry (tests move it); default Date.now. */
  now?: () => number;
}

/** Hono environment of the admin routes: the caller's organization. */
export interface AdminEnv {
  Variables: { orgId: string; bodyTiming: BodyTiming };
}
