/**
 * Where an accepted submission's JS-thread time goes, step by step (ingest/steps.ts),
 * from a V8 CPU profile of the service: each sample is counted for the innermost step
 * on its stack, found by the step's function or the functions it calls by name (so a
 * profile of the code before the steps were named, where routes/ingest.ts called them
 * in line, is read the same way). Time outside any step is counted by the folder of
 * the innermost project function on the stack (routes/, store/, delivery/, ...), or as
 * the runtime and packages (Deno.serve, Hono, garbage collection). Time in an async
 * function counts only while on the stack: a resumed `await` runs under the root, so
 * the batcher's commit, for example, counts under store/, not under "seal and store".
 *
 *     deno run -R bench/profile_steps.ts PROFILE REQUESTS
 */

/** A V8 CPU profile (`deno run --cpu-prof`), as far as this reads it. */
export interface CpuProfile {
  nodes: {
    id: number;
    callFrame: { functionName: string; url: string };
    children?: number[];
  }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * The steps in pipeline order, each with the functions that are it: `name` or
 * `name@path-suffix` where the name alone is ambiguous.
 */
export const STEPS: [step: string, functions: string[]][] = [
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

/** JS-thread µs per request: per step, then outside the steps by place; `busy` in all. */
export interface StepBreakdown {
  steps: Map<string, number>;
  outside: Map<string, number>;
  busy: number;
}

function matcherOf(functions: string[]) {
  const parsed = functions.map((f) => f.split("@") as [string, string?]);
  return (name: string, url: string) =>
    parsed.some(([fn, place]) => fn === name && (place === undefined || url.endsWith(place)));
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

/** The profile's busy time per request, by step and, outside the steps, by place. */
export function stepBreakdown(profile: CpuProfile, requests: number): StepBreakdown {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) {
    for (const child of node.children ?? []) parentOf.set(child, node.id);
  }
  const matchers = STEPS.map(([step, functions]) => [step, matcherOf(functions)] as const);
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
  const steps = new Map<string, number>(STEPS.map(([step]) => [step, 0]));
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

/** The breakdown as lines to print. */
export function formatBreakdown(breakdown: StepBreakdown): string[] {
  const line = (name: string, us: number) => `  ${us.toFixed(1).padStart(7)} µs/req  ${name}`;
  const lines = [`JS thread busy ${breakdown.busy.toFixed(1)} µs/req; in the steps:`];
  for (const [step, us] of breakdown.steps) lines.push(line(step, us));
  lines.push("outside the steps:");
  for (const [place, us] of [...breakdown.outside].sort((a, b) => b[1] - a[1])) {
    lines.push(line(place, us));
  }
  return lines;
}

if (import.meta.main) {
  const [file, requests] = Deno.args;
  if (!file || !requests) throw new Error("Usage: profile_steps.ts PROFILE REQUESTS");
  const profile: CpuProfile = JSON.parse(await Deno.readTextFile(file));
  for (const line of formatBreakdown(stepBreakdown(profile, Number(requests)))) console.log(line);
}
