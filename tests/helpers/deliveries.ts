/** Helpers of the destination health and redelivery tests: views, outcomes, settling. */
import assert from "node:assert/strict";
import { decodeJob, type JobRecord, type StoredJob } from "../../store/job_record.ts";
import { jobsPrefix } from "../../store/keys.ts";
import type { Harness } from "./harness.ts";
import { startWebhookSink } from "./sink.ts";
import { waitFor } from "./wait.ts";

/** A destination as GET /forms/:id/destinations shows it. */
export interface DestinationView {
  id: string;
  isEnabled: boolean;
  health: { state: string; reason: string | null; since: string | null };
}

/** A delivery outcome as GET /forms/:id/deliveries shows it. */
export interface OutcomeView {
  deliveryId: string;
  submissionId: string;
  destinationId: string;
  status: string;
  attempts: number;
  lastError: string | null;
  nextAttemptAt: string | null;
}

/** A webhook destination body. */
export const webhook = (url: string) => ({ type: "webhook", config: { url } });

/** One destination of a form as listed. */
export async function destinationView(
  h: Harness,
  formId: string,
  id: string,
): Promise<DestinationView> {
  const response = await h.admin("GET", `/forms/${formId}/destinations`);
  assert.equal(response.status, 200);
  const found = (await response.json()).destinations.find((d: DestinationView) => d.id === id);
  assert.ok(found, `destination ${id} is listed`);
  return found;
}

/** A form's recent outcomes. */
export async function outcomeViews(h: Harness, formId: string): Promise<OutcomeView[]> {
  const response = await h.admin("GET", `/forms/${formId}/deliveries?limit=500`);
  assert.equal(response.status, 200);
  return (await response.json()).deliveries;
}

/** The unfinished jobs in KV. */
export async function storedJobs(h: Harness): Promise<JobRecord[]> {
  const jobs: JobRecord[] = [];
  for await (const entry of h.service.db.kv.list<StoredJob>({ prefix: jobsPrefix() })) {
    jobs.push(decodeJob(entry));
  }
  return jobs;
}

/**
 * Submits once and waits until none of its jobs is pending or in flight (each is final
 * or held) and the engine is idle; returns the submission id.
 */
export async function submitAndSettle(
  h: Harness,
  publicKey: string,
  payload: unknown = { name: "Ada" },
): Promise<string> {
  const response = await h.submit(publicKey, payload);
  assert.equal(response.status, 202);
  const { submissionId } = await response.json();
  await waitFor(async () => {
    const { active, waiting } = h.service.engine!.stats();
    const unsettled = (await storedJobs(h)).filter((job) => job.state !== "held");
    return unsettled.length === 0 && active === 0 && waiting === 0;
  }, { message: `jobs of ${submissionId} final or held` });
  return submissionId;
}

/** A receiver that refuses with `status` while `state.failing`, else answers 200. */
export function switchableSink(status: number) {
  const state = { failing: true };
  const sink = startWebhookSink(() =>
    state.failing ? new Response("no", { status }) : new Response("ok")
  );
  return { sink, state };
}
