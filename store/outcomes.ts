/**
 * Delivery outcomes: the record of each job's latest state that tenants list (ids,
 * status, attempts, errors, times; never payload), kept for 30 days.
 *
 * @module
 */
import type { DestinationType } from "../connectors/registry.ts";
import type { Db } from "./db.ts";
import type { JobRecord } from "./job_record.ts";
import { outcomesOfFormPrefix } from "./keys.ts";

/** A delivery outcome as listed to tenants: ids, status, attempts, errors, times. Never payload. */
export interface DeliveryOutcome {
  submissionId: string;
  destinationId: string;
  destinationType: DestinationType;
  /** `held`: its destination is paused; delivered when resumed (destination_health.ts). */
  status: "retrying" | "held" | "delivered" | "failed";
  attempts: number;
  lastError: string | null;
  lastStatusCode: number | null;
  detail: string | null;
  submittedAt: string;
  updatedAt: string;
  nextAttemptAt: string | null;
}

/** How long outcomes are kept. */
export const OUTCOME_TTL_MS = 30 * 24 * 3600 * 1000;

/** Recent outcomes of a form, newest first. */
export async function listOutcomes(
  db: Db,
  formId: string,
  limit: number,
): Promise<DeliveryOutcome[]> {
  const outcomes: DeliveryOutcome[] = [];
  const iter = db.kv.list<DeliveryOutcome>({ prefix: outcomesOfFormPrefix(formId) }, {
    reverse: true,
    limit,
  });
  for await (const entry of iter) outcomes.push(entry.value);
  return outcomes;
}

/** The outcome record of a job at its latest state. */
export function outcomeOf(
  job: JobRecord,
  status: DeliveryOutcome["status"],
  detail: string | null = null,
): DeliveryOutcome {
  return {
    submissionId: job.submissionId,
    destinationId: job.destinationId,
    destinationType: job.type,
    status,
    attempts: job.attempts,
    lastError: job.lastError,
    lastStatusCode: job.lastStatusCode,
    detail,
    submittedAt: new Date(job.submittedAt).toISOString(),
    updatedAt: new Date(job.updatedAt).toISOString(),
    nextAttemptAt: status === "retrying" ? new Date(job.dueAt).toISOString() : null,
  };
}
