/**
 * bench:deliver — delivery throughput and latency. Starts main.ts on a file-backed KV
 * with a form of two webhook destinations on a local sink, then:
 *  1. throughput: accepts N submissions (50 at a time) and measures deliveries per
 *     second once acceptance is over (steady state: the middle 80 % of arrivals);
 *  2. idle latency: 200 submissions one after another, each waiting for both
 *     arrivals; prints p50/p99 of the time from the 202 to the arrival.
 */
import { peakRssMb, startBenchService } from "./lib.ts";

const N = Number(Deno.env.get("BENCH_SUBMISSIONS") ?? "6000");
const IDLE = 200;

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

const service = await startBenchService(sinkUrl, {
  DELIVERY_CONCURRENCY: Deno.env.get("DELIVERY_CONCURRENCY") ?? "32",
  // The whole batch is accepted before its deliveries are timed: the backlog bound (10 000
  // jobs per organization by default) must hold its 2 × N jobs.
  BACKLOG_MAX_JOBS: String(Math.max(20_000, 2 * N)),
  BACKLOG_ORG_SHARE: "1",
});
const origin = service.origin;
const destinations = service.destinationIds;

const body = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "Hello" });

async function submit(): Promise<{ id: string; acceptedAt: number }> {
  const response = await fetch(`${origin}/v1/f/${service.publicKey}`, {
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

// 1. Throughput.
const acceptStart = performance.now();
let next = 0;
await Promise.all(Array.from({ length: 50 }, async () => {
  while (next < N) {
    next++;
    await submit();
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
const duringRate = times.filter((t) => t < acceptEnd).length / ((acceptEnd - acceptStart) / 1000);
const total = arrivals.size;
arrivals.clear();

// 2. Idle latency: one submission at a time, waiting for both arrivals.
function arrival(key: string): Promise<number> {
  const seen = arrivals.get(key);
  if (seen !== undefined) return Promise.resolve(seen);
  return new Promise((resolve) => waiters.set(key, () => resolve(arrivals.get(key)!)));
}
const latencies: number[] = [];
for (let i = 0; i < IDLE; i++) {
  const { id, acceptedAt } = await submit();
  for (const destinationId of destinations) {
    latencies.push(await arrival(`${id}.${destinationId}`) - acceptedAt);
  }
  waiters.clear();
}
latencies.sort((a, b) => a - b);

const rss = await peakRssMb(service.child.pid);
await service.stop();
await sink.shutdown();

console.log(`bench:deliver — ${N} submissions × 2 webhook destinations on a local sink`);
console.log(
  `accepted in ${((acceptEnd - acceptStart) / 1000).toFixed(1)} s; deliveries during acceptance ` +
    `${duringRate.toFixed(0)}/s; arrived ${total} of ${2 * N}`,
);
console.log(
  `steady-state deliveries after acceptance: ${steadyRate.toFixed(0)}/s (target ≥ 4 000)`,
);
console.log(
  `idle latency, 202 → arrival (${latencies.length} deliveries): p50 ${
    percentile(latencies, 0.5).toFixed(1)
  } ms, p99 ${percentile(latencies, 0.99).toFixed(1)} ms (target p50 < 50 ms); peak RSS ${rss} MB`,
);
