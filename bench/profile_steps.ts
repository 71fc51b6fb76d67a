/**
 * Where an accepted submission's JS-thread time goes, step by step (ingest/steps.ts),
 * and a delivered one's (DELIVERY_STEPS: its acceptance, then claim, envelope, message,
 * send, result, commits), from a V8 CPU profile of the service: each sample is counted
 * for the innermost step on its stack, found by the step's function or the functions it
 * calls by name (so a profile of the code before the steps were named, where
 * routes/ingest.ts called them in line, is read the same way). Time outside any step is
 * counted by the folder of the innermost project function on the stack (routes/, store/,
 * delivery/, ...), or as the runtime and packages (Deno.serve, Hono, garbage
 * collection). Time in an async function counts only while on the stack: a resumed
 * `await` runs under the root, so the batcher's commit, for example, counts under
 * store/, not under "seal and store".
 *
 *     deno run -R bench/profile_steps.ts PROFILE REQUESTS [delivery]
 */

/** A V8 CPU profile (`deno run --cpu-prof`), as far as this reads it. */
export interface CpuProfile {
  nodes: {
    id: number;
    callFrame: { functionName: string; url: string };
    children?: number[];
  }[];
  /** Microseconds, on the clock of the samples' times. */
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/**
 * The part of a profiled process's life a benchmark measured: `ms` long, ending
 * `beforeEndMs` before the profile does (the process's stop, which writes the profile).
 */
export interface ProfileWindow {
  ms: number;
  beforeEndMs: number;
}

/** Steps in order, each with its functions: `name`, `name@path-suffix`, or `*@path-suffix`. */
export type Steps = [step: string, functions: string[]][];

/** The ingestion pipeline's steps, in order. */
export const STEPS: Steps = [
  ["form look-up", ["find@ingest/pipeline.ts", "lookUp@routes/ingest.ts"]],
  ["client and rate", ["limitClient", "clientAddress", "reserve@store/rate_limit.ts"]],
  ["body", ["readSubmissionBody", "readBodyWithin", "admit@body_gate.ts"]],
  ["parse", ["parseSubmission", "parsePayload"]],
  ["spam rules", ["checkSpam", "takeHoneypot", "caught", "dropPageToken"]],
  ["captcha", ["checkCaptcha", "verifyCaptcha", "openCaptchaSecret"]],
  ["route", ["routeSubmission", "destinationsOf", "matchingDestinations", "sentNowhere"]],
  ["admit", ["admitJobs", "admit@delivery/admission.ts"]],
  [
    "seal and store",
    ["sealAndStore", "storeEnvelope", "envelopeOf", "sealEnvelope", "submissionIdAt"],
  ],
  ["wake", ["wake@ingest/steps.ts", "wakeStored"]],
];

/**
 * A delivered submission's steps: its acceptance (the pipeline's steps as one), then its
 * delivery. A sample counts for the innermost frame that is a step's; a frame that is
 * two steps' (a claim's `takeNext` in the dispatcher) counts for the first listed. The
 * commits carry the acceptance's, the claim's and the result's writes together.
 */
export const DELIVERY_STEPS: Steps = [
  [
    "accept (the ingestion route and steps)",
    [
      ...STEPS.flatMap(([, functions]) => functions),
      "*@routes/ingest.ts",
      "*@ingest/pipeline.ts",
      "*@ingest/steps.ts",
      "*@body_reading.ts",
    ],
  ],
  ["claim", [
    "claim@delivery/engine.ts",
    "claimKnownJob",
    "takeNext",
    "start@delivery/dispatcher.ts",
  ]],
  ["open the envelope", ["openEnvelope", "sealedPart"]],
  ["build the message or request", [
    "build@connectors/smtp.ts",
    "buildMessage",
    "post@connectors/webhook.ts",
  ]],
  [
    "send (the SMTP conversation or HTTP request)",
    [
      "sendMail",
      "*@connectors/smtp/client.ts",
      "*@connectors/smtp/pool.ts",
      "*@connectors/http.ts",
      "*@connectors/http_transport.ts",
      "*@connectors/outbound_guard.ts",
    ],
  ],
  ["outbound budget and pace", [
    "*@delivery/outbound_budget.ts",
    "*@delivery/pace.ts",
    "*@delivery/token_buckets.ts",
  ]],
  ["the attempt's own code", [
    "attempt@delivery/attempt.ts",
    "sendEnvelope",
    "attemptThenRecord",
    "run@delivery/engine.ts",
  ]],
  ["record the result", ["*@delivery/apply_result.ts", "finishJob", "*@store/outcomes.ts"]],
  ["KV commits (acceptance, claim, result)", ["*@store/batcher.ts", "timedCommit"]],
  ["dispatch", ["*@delivery/dispatcher.ts", "*@delivery/claim_hints.ts"]],
  ["delivery log line and metrics", ["onAttempt", "*@log.ts", "*@metrics.ts"]],
];

/** JS-thread µs per request: per step, then outside the steps by place; `busy` in all. */
export interface StepBreakdown {
  steps: Map<string, number>;
  outside: Map<string, number>;
  busy: number;
}

function matcherOf(functions: string[]) {
  const parsed = functions.map((f) => f.split("@") as [string, string?]);
  return (name: string, url: string) =>
    parsed.some(([fn, place]) =>
      (fn === name || fn === "*") && (place === undefined || url.endsWith(place))
    );
}

/**
 * The project folder of a source URL ("routes/", "store/", …), or the file at the top
 * level ("listener.ts"); null outside the project.
 */
function placeOf(url: string): string | null {
  if (!url.startsWith("file:") || url.includes("/node_modules/")) return null;
  const match =
    /\/(ingest|routes|store|delivery|connectors|rules|console|cli)\/(?!.*\/(ingest|routes|store|delivery|connectors|rules|console|cli)\/)/
      .exec(url);
  return match ? `${match[1]}/` : url.slice(url.lastIndexOf("/") + 1);
}

/** The profile's busy time per request (or unit), by step and, outside the steps, by place. */
export function stepBreakdown(
  profile: CpuProfile,
  requests: number,
  stepList: Steps = STEPS,
): StepBreakdown {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) {
    for (const child of node.children ?? []) parentOf.set(child, node.id);
  }
  const matchers = stepList.map(([step, functions]) => [step, matcherOf(functions)] as const);
  /** Each node's step or place, found once per node (samples share them). */
  const bucketOf = new Map<number, { step: boolean; name: string } | null>();
  function bucket(id: number) {
    if (bucketOf.has(id)) return bucketOf.get(id)!;
    let place: string | null = null;
    let found: { step: boolean; name: string } | null = null;
    for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
      const { functionName, url } = byId.get(at)!.callFrame;
      if (at === id && functionName === "(idle)") break;
      const step = matchers.find(([, matches]) => matches(functionName, url));
      if (step) {
        found = { step: true, name: step[0] };
        break;
      }
      place ??= placeOf(url);
    }
    if (found === null && byId.get(id)!.callFrame.functionName !== "(idle)") {
      found = { step: false, name: place ?? "runtime and packages (Deno.serve, Hono, GC)" };
    }
    bucketOf.set(id, found);
    return found;
  }
  const steps = new Map<string, number>(stepList.map(([step]) => [step, 0]));
  const outside = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const found = bucket(id);
    if (found === null) return;
    const us = (profile.timeDeltas[i] ?? 0) / requests;
    busy += us;
    const map = found.step ? steps : outside;
    map.set(found.name, (map.get(found.name) ?? 0) + us);
  });
  return { steps, outside, busy };
}

/** The breakdown as lines to print, per `unit` ("req", "email", "submission"). */
export function formatBreakdown(breakdown: StepBreakdown, unit = "req"): string[] {
  const line = (name: string, us: number) => `  ${us.toFixed(1).padStart(7)} µs/${unit}  ${name}`;
  const lines = [`JS thread busy ${breakdown.busy.toFixed(1)} µs/${unit}; in the steps:`];
  for (const [step, us] of breakdown.steps) lines.push(line(step, us));
  lines.push("outside the steps:");
  for (const [place, us] of [...breakdown.outside].sort((a, b) => b[1] - a[1])) {
    lines.push(line(place, us));
  }
  return lines;
}

/**
 * Reads the one profile a service wrote into `dir` (BENCH_PROFILE_DIR), and removes `dir`.
 * With `window`, only the samples taken in it are kept: the process's start, and its
 * stop (the rate limiter writing its counts, say), are not the load's cost.
 */
export async function takeProfile(dir: string, window?: ProfileWindow): Promise<CpuProfile> {
  const [file] = [...Deno.readDirSync(dir)].map((entry) => entry.name);
  const profile: CpuProfile = JSON.parse(await Deno.readTextFile(`${dir}/${file}`));
  await Deno.remove(dir, { recursive: true });
  return window === undefined ? profile : profileWithin(profile, window);
}

/** The samples of `profile` taken within `window`. */
export function profileWithin(profile: CpuProfile, window: ProfileWindow): CpuProfile {
  const to = profile.endTime - window.beforeEndMs * 1000;
  const from = to - window.ms * 1000;
  const samples: number[] = [];
  const timeDeltas: number[] = [];
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    if (at < from || at > to) return;
    samples.push(id);
    timeDeltas.push(profile.timeDeltas[i] ?? 0);
  });
  return { ...profile, startTime: from, endTime: to, samples, timeDeltas };
}

if (import.meta.main) {
  const [file, requests, kind] = Deno.args;
  if (!file || !requests) throw new Error("Usage: profile_steps.ts PROFILE REQUESTS [delivery]");
  const profile: CpuProfile = JSON.parse(await Deno.readTextFile(file));
  const stepList = kind === "delivery" ? DELIVERY_STEPS : STEPS;
  const unit = kind === "delivery" ? "submission" : "req";
  for (const line of formatBreakdown(stepBreakdown(profile, Number(requests), stepList), unit)) {
    console.log(line);
  }
}
