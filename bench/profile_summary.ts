/**
 * Reads a V8 CPU profile (`deno run --cpu-prof`, or BENCH_PROFILE_DIR in the benchmarks) and
 * prints where the JS thread's time went: self and inclusive time per function, per request
 * when the number of requests is given, and optionally who called the functions matching a
 * prefix. Time in async functions is counted for the part that ran on the stack (V8 counts
 * a resumed `await` under the root). Not a test.
 *
 *     deno run -R bench/profile_summary.ts PROFILE [REQUESTS] [TOP] [CALLERS_OF,...]
 */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, requestsArg, topArg, callersArg] = Deno.args;
if (!file) throw new Error("Usage: profile_summary.ts PROFILE [REQUESTS] [TOP] [CALLERS_OF,...]");
const profile: Profile = JSON.parse(await Deno.readTextFile(file));
const requests = Number(requestsArg ?? 0);
const top = Number(topArg ?? 30);

const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parentOf = new Map<number, number>();
for (const node of profile.nodes) {
  for (const child of node.children ?? []) parentOf.set(child, node.id);
}

/** A function's name and place, with the path up to the project or package cut off. */
function nameOf(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const place = url.replace(/^.*\/(node_modules\/\.deno\/|formrelay[^/]*\/|ingest\/)/, "");
  return `${functionName || "(anonymous)"} ${place}:${lineNumber + 1}`;
}

/** The stack of a sample, innermost first. */
function* stack(id: number): Generator<ProfileNode> {
  for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
    yield byId.get(at)!;
  }
}

const self = new Map<string, number>();
const inclusive = new Map<string, number>();
const callers = new Map<string, Map<string, number>>();
const callerPrefixes = callersArg ? callersArg.split(",") : [];
const add = (map: Map<string, number>, key: string, us: number) =>
  map.set(key, (map.get(key) ?? 0) + us);
let total = 0;
let idle = 0;
profile.samples.forEach((id, i) => {
  const us = profile.timeDeltas[i] ?? 0;
  const node = byId.get(id)!;
  total += us;
  if (node.callFrame.functionName === "(idle)") return void (idle += us);
  add(self, nameOf(node), us);
  const seen = new Set<string>();
  const frames = [...stack(id)];
  frames.forEach((frame, depth) => {
    const name = nameOf(frame);
    if (seen.has(name)) return;
    seen.add(name);
    add(inclusive, name, us);
    const prefix = callerPrefixes.find((p) => name.startsWith(p));
    if (prefix === undefined) return;
    const chain = frames.slice(depth + 1, depth + 4).map((f) => nameOf(f).split(" ")[0]).join(
      " < ",
    );
    if (!callers.has(prefix)) callers.set(prefix, new Map());
    add(callers.get(prefix)!, chain, us);
  });
});

const show = (us: number) =>
  requests > 0
    ? `${(us / requests).toFixed(1).padStart(7)} µs/req`
    : `${(us / 1000).toFixed(0).padStart(7)} ms`;
const print = (title: string, map: Map<string, number>) => {
  console.log(`--- ${title}`);
  for (const [name, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(show(us), name);
  }
};
console.log(
  `profile ${(total / 1e6).toFixed(2)} s: busy ${((total - idle) / 1e6).toFixed(2)} s` +
    (requests > 0 ? `, ${show(total - idle).trim()} over ${requests} requests` : ""),
);
print("self", self);
print("inclusive", inclusive);
for (const [prefix, map] of callers) print(`callers of ${prefix}`, map);
