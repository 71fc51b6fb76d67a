/**
 * bench:deliver — delivery throughput and latency, against the bare durable delivery.
 * Starts main.ts on a file-backed KV with a form of two webhook destinations on a local
 * sink, with the service's default DELIVERY_CONCURRENCY (set it to compare another), then:
 *  1. throughput: accepts N submissions (50 at a time) and measures deliveries per
 *     second once acceptance is over (steady state: the middle 80 % of arrivals);
 *  2. the bare durable delivery (../shared/bench/bare_durable_delivery.ts beside the clone,
 *     BARE_DURABLE_DIR to point elsewhere: 2 × N stored jobs claimed by a versionstamp
 *     check, POSTed to a local sink, deleted, 32 in flight) on its own KV file; 1 and 2
 *     alternate BENCH_ROUNDS times (2), so load from elsewhere falls on both;
 *  3. idle latency: 200 submissions one after another, each waiting for both
 *     arrivals; prints p50/p99 of the time from the 202 to the arrival.
 * Each round also gives the service's CPU time (user + system, all threads) from the
 * first post to the last arrival, per submission (two deliveries each). Last, one more
 * throughput run under a CPU profile (unless BENCH_STEPS=0) gives the JS thread's µs per
 * submission in each step of its acceptance and deliveries (bench/profile_steps.ts), read
 * over that run alone (the process's start and stop left out).
 */
import { type BenchService, cpuSeconds, peakRssMb, startBenchService } from "./lib.ts";
import { DELIVERY_STEPS, formatBreakdown, stepBreakdown, takeProfile } from "./profile_steps.ts";

const N = Number(Deno.env.get("BENCH_SUBMISSIONS") ?? "6000");
const ROUNDS = Number(Deno.env.get("BENCH_ROUNDS") ?? "2");
const IDLE = 200;
const BARE_DURABLE = new URL(
  "bare_durable_delivery.ts",
  Deno.env.get("BARE_DURABLE_DIR") ?? new URL("../../shared/bench/", import.meta.url),
).pathname;

const arrivals = new Map<string, number>(); // webhook-id → arrival time
const waiters = new Map<string, () => void>();
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  const id = request.headers.get("webhook-id")!;
  if (!arrivals.has(id)) arrivals.set(id, performance.now());
  waiters.get(id)?.();
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}/hook`;

/** DELIVERY_CONCURRENCY as set for this run; unset, the service runs with its default. */
const CONCURRENCY = Deno.env.get("DELIVERY_CONCURRENCY");

/** BENCH_STEPS=0 leaves out the profiled run (bench:compare does). */
const STEPS_RUN = Deno.env.get("BENCH_STEPS") !== "0";

function startService(profileDir?: string): Promise<BenchService> {
  return startBenchService(sinkUrl, {
    ...(CONCURRENCY === undefined ? {} : { DELIVERY_CONCURRENCY: CONCURRENCY }),
    // The whole batch is accepted before its deliveries are timed: the backlog bound (10 000
    // jobs per organization by default) must hold its 2 × N jobs.
    BACKLOG_MAX_JOBS: String(Math.max(20_000, 2 * N)),
    BACKLOG_ORG_SHARE: "1",
  }, { profileDir });
}

const body = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "Hello" });

async function submit(service: BenchService): Promise<{ id: string; acceptedAt: number }> {
  const response = await fetch(`${service.origin}/v1/f/${service.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  const acceptedAt = performance.now();
  if (response.status !== 202) throw new Error(`status ${response.status}`);
  return { id: (await response.json()).submissionId, acceptedAt };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

/** 1. Throughput of one service: N submissions accepted, then their deliveries timed. */
async function throughput(service: BenchService) {
  arrivals.clear();
  const cpuBefore = await cpuSeconds(service.child.pid);
  const acceptStart = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 50 }, async () => {
    while (next < N) {
      next++;
      await submit(service);
    }
  }));
  const acceptEnd = performance.now();
  const deadline = Date.now() + 300_000;
  while (arrivals.size < 2 * N && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const times = [...arrivals.values()].sort((a, b) => a - b);
  const after = times.filter((t) => t >= acceptEnd);
  const steady = after.slice(Math.floor(after.length * 0.1), Math.floor(after.length * 0.9));
  const steadyRate = (steady.length - 1) / ((steady.at(-1)! - steady[0]) / 1000);
  const duringRate = times.filter((t) => t < acceptEnd).length /
    ((acceptEnd - acceptStart) / 1000);
  const total = arrivals.size;
  // Accept to the last arrival: each submission's whole cost, its two deliveries included.
  const cpuMsPerSubmission = 1000 * (await cpuSeconds(service.child.pid) - cpuBefore) / N;
  arrivals.clear();
  return {
    acceptSeconds: (acceptEnd - acceptStart) / 1000,
    steadyRate,
    duringRate,
    total,
    cpuMsPerSubmission,
  };
}

/** 2. The bare durable delivery of 2 × N jobs: its deliveries per second. */
async function bareDurable(): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-bare-" });
  try {
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--unstable-kv", BARE_DURABLE, `${dir}/bare.kv`, String(2 * N)],
      stdout: "piped",
      stderr: "inherit",
    }).output();
    const text = new TextDecoder().decode(output.stdout);
    const rate = Number(/bare durable deliveries\/s (\d+)/.exec(text)?.[1]);
    if (!output.success || !Number.isFinite(rate)) throw new Error(`bare run failed: ${text}`);
    return rate;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** 3. Idle latency: one submission at a time, waiting for both arrivals. */
async function idleLatency(service: BenchService): Promise<number[]> {
  function arrival(key: string): Promise<number> {
    const seen = arrivals.get(key);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve) => waiters.set(key, () => resolve(arrivals.get(key)!)));
  }
  const latencies: number[] = [];
  for (let i = 0; i < IDLE; i++) {
    const { id, acceptedAt } = await submit(service);
    for (const destinationId of service.destinationIds) {
      latencies.push(await arrival(`${id}.${destinationId}`) - acceptedAt);
    }
    waiters.clear();
  }
  return latencies.sort((a, b) => a - b);
}

const rounds: { run: Awaited<ReturnType<typeof throughput>>; bare: number }[] = [];
let latencies: number[] = [];
let rss = 0;
for (let round = 0; round < ROUNDS; round++) {
  const service = await startService();
  try {
    const run = await throughput(service);
    if (round === ROUNDS - 1) {
      latencies = await idleLatency(service);
      rss = await peakRssMb(service.child.pid);
    }
    rounds.push({ run, bare: 0 });
  } finally {
    await service.stop();
  }
  rounds[round].bare = await bareDurable();
}
let profiled: { run: Awaited<ReturnType<typeof throughput>>; steps: string[] } | null = null;
if (STEPS_RUN) {
  const profileDir = await Deno.makeTempDir({ prefix: "formrelay-bench-profile-" });
  const service = await startService(profileDir);
  let run;
  const started = performance.now();
  let ended = started;
  try {
    run = await throughput(service);
    ended = performance.now();
  } finally {
    await service.stop();
  }
  // Read over the run alone: the process's start and stop are not its deliveries' cost.
  const window = { ms: ended - started, beforeEndMs: performance.now() - ended };
  const steps = stepBreakdown(await takeProfile(profileDir, window), N, DELIVERY_STEPS);
  profiled = { run, steps: formatBreakdown(steps, "submission") };
}
await sink.shutdown();

console.log(
  `bench:deliver — ${N} submissions × 2 webhook destinations on a local sink; ` +
    `${ROUNDS} alternating rounds with the bare durable delivery of ${2 * N} jobs; ` +
    `DELIVERY_CONCURRENCY ${CONCURRENCY ?? "default"}`,
);
rounds.forEach(({ run, bare }, i) => {
  console.log(
    `round ${i + 1}: accepted in ${run.acceptSeconds.toFixed(1)} s; deliveries during acceptance ` +
      `${run.duringRate.toFixed(0)}/s; arrived ${run.total} of ${2 * N}; steady-state after ` +
      `acceptance ${run.steadyRate.toFixed(0)}/s; bare durable ${bare}/s; ratio ${
        (run.steadyRate / bare).toFixed(3)
      }; service CPU ${run.cpuMsPerSubmission.toFixed(3)} ms per delivered submission`,
  );
});
const ratio = rounds.reduce((sum, r) => sum + r.run.steadyRate, 0) /
  rounds.reduce((sum, r) => sum + r.bare, 0);
console.log(
  `ratio to the bare durable delivery ${ratio.toFixed(3)} (target ≥ 0.85, goal 1.0)`,
);
console.log(
  `idle latency, 202 → arrival (${latencies.length} deliveries): p50 ${
    percentile(latencies, 0.5).toFixed(1)
  } ms, p99 ${percentile(latencies, 0.99).toFixed(1)} ms (target p50 < 50 ms); peak RSS ${rss} MB`,
);
if (profiled !== null) {
  console.log(
    `profiled run: service CPU ${profiled.run.cpuMsPerSubmission.toFixed(3)} ms per submission ` +
      "(a profile costs a few per cent). The JS thread's time by step, as V8 samples it " +
      "(by the wall clock: a socket write or a commit that gives the core away counts whole):",
  );
  for (const line of profiled.steps) console.log(line);
}
