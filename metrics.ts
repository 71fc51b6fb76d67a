/**
 * What operators see of formrelay: the one Prometheus registry of the process
 * (prom-client) and the OpenTelemetry spans' attributes. The rest of the code calls
 * the hooks below, one line each; the hot path (ingestion) only adds to counters whose
 * label children are bound in advance, so a submission costs a few increments.
 *
 * Labels never carry payload data, secrets, addresses or unbounded values: no
 * submission ids, and form and destination ids only with `METRICS_PER_FORM=true`
 * (otherwise their labels are empty). Traces carry the submission id as the attribute
 * `formrelay.submission_id` on the ingestion request's span and on every delivery
 * attempt's span, so one can be followed to the other.
 *
 * Gauges are read at scrape time from what this process knows (connections, bodies,
 * deliveries running) and from a bounded, cached read of the backlog in KV
 * (store/backlog.ts), never a full scan.
 *
 * @module
 */
import { trace } from "@opentelemetry/api";
import client from "prom-client";
import { DESTINATION_TYPES } from "./connectors/registry.ts";
import type { RefusalReason } from "./refusal_reasons.ts";

/** The registry `/metrics` shows. */
export const registry = new client.Registry();

/**
 * Delivery attempt outcomes as labelled ("held" is a job kept back while its destination is
 * paused, "deferred" one kept back by its organization's outbound budget, "rate_limited" an
 * attempt the receiver refused for rate, tried again uncounted).
 */
const DELIVERY_OUTCOMES = [
  "delivered",
  "retry",
  "rate_limited",
  "failed",
  "held",
  "deferred",
  "lease_lost",
] as const;

const tracer = trace.getTracer("formrelay");
/**
 * Whether spans go anywhere: Deno's OpenTelemetry exports them with OTEL_DENO=true only.
 * Without it a delivery's span (a no-op's attributes and start time) is not built at all.
 */
const tracing = (() => {
  try {
    return Deno.env.get("OTEL_DENO") === "true";
  } catch {
    return false; // Without env access Deno's telemetry is not on either.
  }
})();
let perForm = false;

const submissionsAccepted = new client.Counter({
  name: "formrelay_submissions_accepted_total",
  help: "Submissions accepted (202) and stored for delivery",
  labelNames: ["form_id"],
  registers: [registry],
  collect: () => reportAccepted(),
});
const acceptedUnlabelled = submissionsAccepted.labels("");
acceptedUnlabelled.inc(0);
// Acceptances without labels are a plain count on the hot path, handed to the counter
// when it is scraped (its collect).
let acceptedCount = 0;
let acceptedReported = 0;
const submissionsRefused = new client.Counter({
  name: "formrelay_submissions_refused_total",
  help:
    "Submissions refused, by answer status and reason (refusal_reasons.ts); spam ones were answered 202",
  labelNames: ["status", "reason"],
  registers: [registry],
});
const refusedChildren = new Map<string, client.Counter.Internal>();

const attempts = new client.Counter({
  name: "formrelay_delivery_attempts_total",
  help: "Delivery attempts by destination type and outcome",
  labelNames: ["type", "outcome", "form_id", "destination_id"],
  registers: [registry],
});
// Every type and outcome starts at 0, so rate() and alerts see the series before the first event.
for (const type of DESTINATION_TYPES) {
  for (const outcome of DELIVERY_OUTCOMES) attempts.labels(type, outcome, "", "").inc(0);
}
const attemptSeconds = new client.Histogram({
  name: "formrelay_delivery_attempt_duration_seconds",
  help: "Time one delivery attempt took, from claim to result",
  labelNames: ["type"],
  buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60],
  registers: [registry],
});
const deliveredSeconds = new client.Histogram({
  name: "formrelay_delivery_latency_seconds",
  help: "Time from a submission's 202 to its delivery to a destination, retries included",
  labelNames: ["type"],
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 7200, 21600, 86400],
  registers: [registry],
});
const commitSeconds = new client.Histogram({
  name: "formrelay_kv_commit_duration_seconds",
  help: "Time one KV commit of the group committer took",
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
  registers: [registry],
});
const commitsBusy = new client.Counter({
  name: "formrelay_kv_commits_busy_total",
  help: "KV commits tried again because another process sharing the KV file wrote first",
  registers: [registry],
});
const commitParts = new client.Histogram({
  name: "formrelay_kv_commit_batch_size",
  help: "Writes (submissions, job claims and outcomes) merged into one KV commit",
  buckets: [1, 2, 5, 10, 20, 50, 100, 200, 450],
  registers: [registry],
});

/** What the gauges read at scrape time; bound by the running service (observeService). */
export interface MetricSources {
  /** Deliveries running and jobs waiting for a slot in this process; null: not delivering. */
  engine(): { active: number; waiting: number } | null;
  /** The destinations this process paces, and their paces (delivery/pace.ts); absent: none. */
  paces?(): Iterable<[string, PaceReading]>;
  /** Whether this process's delivery engine runs. */
  delivering(): boolean;
  /** Request bodies held now (ingest/body_gate.ts). */
  bodies(): { bytes: number; bodies: number };
  /** The backlog in KV (store/backlog.ts's reader; typed here so the store can import this module). */
  backlog: {
    read(): Promise<{
      jobs: { due: number; inFlight: number; retrying: number; held: number; truncated: boolean };
      destinations: { paused: number; truncated: boolean };
    }>;
  };
}

/** One destination's pace as the gauge reads it (delivery/engine.ts DestinationPace). */
export interface PaceReading {
  concurrency: number;
  inFlight: number;
  heldUntil: number | null;
  ratePerSecond: number | null;
}

let sources: MetricSources | null = null;
let server: { stats(): { connections: number; waiting: number } } | null = null;

/** Binds the gauges to a running service, and sets whether labels carry form ids. */
export function observeService(bound: MetricSources, options: { perForm: boolean }): void {
  sources = bound;
  perForm = options.perForm;
}

/** Binds the connection gauges to the listener (none on Deno Deploy). */
export function observeServer(listener: { stats(): { connections: number; waiting: number } }) {
  server = listener;
}

/** A gauge whose value is read when scraped. */
function gauge(
  name: string,
  help: string,
  labelNames: string[],
  collect: (set: (labels: Record<string, string>, value: number) => void) => void | Promise<void>,
) {
  new client.Gauge({
    name,
    help,
    labelNames,
    registers: [registry],
    async collect() {
      this.reset();
      // A failed KV read leaves the gauge empty rather than failing the whole scrape
      // (/readyz names the failure).
      try {
        await collect((labels, value) => this.set(labels, value));
      } catch {
        // Left empty.
      }
    },
  });
}

gauge(
  "formrelay_http_connections",
  "Open client connections, and those waiting for a request head",
  [
    "state",
  ],
  (set) => {
    if (server === null) return;
    const { connections, waiting } = server.stats();
    set({ state: "open" }, connections);
    set({ state: "waiting" }, waiting);
  },
);
gauge("formrelay_http_bodies_in_flight", "Request bodies being read and processed", [], (set) => {
  if (sources !== null) set({}, sources.bodies().bodies);
});
gauge("formrelay_http_body_bytes_in_flight", "Bytes reserved for request bodies", [], (set) => {
  if (sources !== null) set({}, sources.bodies().bytes);
});
gauge("formrelay_delivery_engine_running", "1 while this process delivers", [], (set) => {
  set({}, sources?.delivering() ? 1 : 0);
});
gauge(
  "formrelay_delivery_slots",
  "This process: deliveries running (active) and woken jobs waiting for a slot (waiting)",
  ["state"],
  (set) => {
    const stats = sources?.engine() ?? null;
    if (stats === null) return;
    set({ state: "active" }, stats.active);
    set({ state: "waiting" }, stats.waiting);
  },
);
gauge(
  "formrelay_destination_pace",
  "Each destination's pace in this process: concurrency (deliveries it may have in flight), " +
    "in_flight, held (1 while a Retry-After or quota holds it), rate_per_second (since it " +
    'refused for rate). Without METRICS_PER_FORM one series per measure, destination_id "": ' +
    "sums, and held and rate_per_second count the destinations held and rate-limited",
  ["measure", "destination_id"],
  (set) => {
    const paces = sources?.paces?.();
    if (!paces) return;
    const now = Date.now();
    const total = { concurrency: 0, in_flight: 0, held: 0, rate_per_second: 0 };
    for (const [id, pace] of paces) {
      const held = pace.heldUntil !== null && pace.heldUntil > now ? 1 : 0;
      if (perForm) {
        set({ measure: "concurrency", destination_id: id }, pace.concurrency);
        set({ measure: "in_flight", destination_id: id }, pace.inFlight);
        set({ measure: "held", destination_id: id }, held);
        if (pace.ratePerSecond !== null) {
          set({ measure: "rate_per_second", destination_id: id }, pace.ratePerSecond);
        }
        continue;
      }
      total.concurrency += pace.concurrency;
      total.in_flight += pace.inFlight;
      total.held += held;
      total.rate_per_second += pace.ratePerSecond === null ? 0 : 1;
    }
    if (perForm) return;
    for (const [measure, value] of Object.entries(total)) {
      set({ measure, destination_id: "" }, value);
    }
  },
);
gauge(
  "formrelay_jobs",
  "Unfinished delivery jobs in KV by state (a bounded read: see formrelay_backlog_read_truncated)",
  ["state"],
  async (set) => {
    if (sources === null) return;
    const { jobs } = await sources.backlog.read();
    set({ state: "due" }, jobs.due);
    set({ state: "in_flight" }, jobs.inFlight);
    set({ state: "retrying" }, jobs.retrying);
    set({ state: "held" }, jobs.held);
  },
);
gauge(
  "formrelay_destinations_paused",
  "Destinations paused for their health (failing by their own fault); their jobs are held",
  [],
  async (set) => {
    if (sources === null) return;
    set({}, (await sources.backlog.read()).destinations.paused);
  },
);
gauge(
  "formrelay_backlog_read_truncated",
  "1 when the bounded backlog read stopped at its bound: job or destination counts are lower bounds",
  [],
  async (set) => {
    if (sources === null) return;
    const { jobs, destinations } = await sources.backlog.read();
    set({}, jobs.truncated || destinations.truncated ? 1 : 0);
  },
);

/**
 * Counts a refusal of `POST /v1/f/:publicKey` by its answer's status and reason
 * (routes/ingest.ts's countIngestAnswer; acceptances are counted by countAccepted).
 */
export function countRefused(status: number, reason: RefusalReason): void {
  refused(String(status), reason);
}

/** Counts a submission answered 202 (one caught as spam as refused with 202). */
export function countAccepted(formId: string, spam: boolean): void {
  if (spam) refused("202", "spam");
  else if (perForm) submissionsAccepted.labels(formId).inc();
  else acceptedCount++;
}

/** Hands the acceptances counted since the last scrape to the counter. */
function reportAccepted() {
  acceptedUnlabelled.inc(acceptedCount - acceptedReported);
  acceptedReported = acceptedCount;
}

/** Counts a refusal (`by` 0: only makes its series exist). */
function refused(status: string, reason: RefusalReason, by = 1) {
  const key = `${status} ${reason}`;
  let child = refusedChildren.get(key);
  if (child === undefined) {
    refusedChildren.set(key, child = submissionsRefused.labels(status, reason));
  }
  child.inc(by);
}

/**
 * Makes the series of the refusals ingestion can give (the error catalogue's) exist at
 * 0, so rate() and alerts see them before the first one (the 405 and 500 of any route
 * only when they happen).
 */
export function openRefusalSeries(refusals: { status: number; reason: RefusalReason }[]): void {
  for (const { status, reason } of refusals) {
    if (status !== 405 && status !== 500) refused(String(status), reason, 0);
  }
}
refused("202", "spam", 0);

/** Puts a submission's id on the request's span (the runtime's, with OTEL_DENO=true). */
export function traceSubmission(submissionId: string): void {
  trace.getActiveSpan()?.setAttribute("formrelay.submission_id", submissionId);
}

/** Label children bound once: looking a child up by its labels costs on every attempt. */
const attemptChildren = new Map<string, ReturnType<typeof attempts.labels>>();
const histogramChildren = new Map<string, {
  attempt: ReturnType<typeof attemptSeconds.labels>;
  delivered: ReturnType<typeof deliveredSeconds.labels>;
}>();

function attemptChild(type: string, outcome: string) {
  const key = `${type} ${outcome}`;
  let child = attemptChildren.get(key);
  if (child === undefined) attemptChildren.set(key, child = attempts.labels(type, outcome, "", ""));
  return child;
}

function typeChildren(type: string) {
  let children = histogramChildren.get(type);
  if (children === undefined) {
    children = { attempt: attemptSeconds.labels(type), delivered: deliveredSeconds.labels(type) };
    histogramChildren.set(type, children);
  }
  return children;
}

/**
 * Counts a delivery attempt and records its span: `result` is the outcome step's
 * ("delivered", "retry", "failed", "held", "lease lost"), `startedMs` the attempt's
 * start on `performance.now()`'s clock.
 */
export function countAttempt(
  job: {
    type: string;
    formId: string;
    destinationId: string;
    submissionId: string;
    submittedAt: number;
  },
  fields: { result: string; statusCode?: unknown },
  startedMs: number,
): void {
  const outcome = fields.result.replace(" ", "_");
  const seconds = (performance.now() - startedMs) / 1000;
  if (perForm) attempts.labels(job.type, outcome, job.formId, job.destinationId).inc();
  else attemptChild(job.type, outcome).inc();
  const byType = typeChildren(job.type);
  byType.attempt.observe(seconds);
  if (outcome === "delivered") {
    byType.delivered.observe(Math.max(0, Date.now() - job.submittedAt) / 1000);
  }
  if (!tracing) return;
  const span = tracer.startSpan("formrelay.delivery", {
    startTime: performance.timeOrigin + startedMs,
    attributes: {
      "formrelay.submission_id": job.submissionId,
      "formrelay.destination_type": job.type,
      "formrelay.outcome": outcome,
      ...(typeof fields.statusCode === "number"
        ? { "formrelay.status_code": fields.statusCode }
        : {}),
    },
  });
  if (outcome === "failed") span.setStatus({ code: 2 });
  span.end();
}

/** Counts a KV commit tried again after another process wrote first (store/kv_busy.ts). */
export function countKvBusy(): void {
  commitsBusy.inc();
}

/** Commits a KV operation of `parts` merged writes, timing it (store/batcher.ts). */
export async function timedCommit(
  op: Deno.AtomicOperation,
  parts: number,
): Promise<Deno.KvCommitResult | Deno.KvCommitError> {
  const started = performance.now();
  try {
    return await op.commit();
  } finally {
    commitSeconds.observe((performance.now() - started) / 1000);
    commitParts.observe(parts);
  }
}

const spamCaught = new client.Counter({
  name: "formrelay_spam_caught_total",
  help:
    "Submissions a form's spam rule caught (answered 202, nothing kept), by rule; form_id with METRICS_PER_FORM",
  labelNames: ["rule", "form_id"],
  registers: [registry],
});
const confirmations = new client.Counter({
  name: "formrelay_confirmations_total",
  help:
    "Confirmations to visitors at acceptance: queued, or not sent and why (address_limit, hourly_limit, no_address)",
  labelNames: ["result"],
  registers: [registry],
});
const unrouted = new client.Counter({
  name: "formrelay_submissions_unrouted_total",
  help: "Submissions accepted that matched no destination's routing conditions",
  labelNames: ["form_id"],
  registers: [registry],
});

/** Counts a submission a spam rule caught. */
export function countSpamCaught(formId: string, rule: string): void {
  spamCaught.labels(rule, perForm ? formId : "").inc();
}

/** Counts a confirmation queued or not sent at acceptance. */
export function countConfirmation(result: string): void {
  confirmations.labels(result).inc();
}

/** Counts a submission that matched no destination's conditions. */
export function countUnrouted(formId: string): void {
  unrouted.labels(perForm ? formId : "").inc();
}
