/**
 * bench:processes — one process against several on one KV file. For each round it
 * starts main.ts once alone and once as BENCH_PROCESSES processes (default 2) on a fresh
 * KV file each, with a form of BENCH_DESTINATIONS webhook destinations (default 2) on a
 * local sink, posts BENCH_SUBMISSIONS submissions (default 4 000) BENCH_IN_FLIGHT at a
 * time (default 40), alternately to each process, and prints the end-to-end time (first
 * post to last arrival at the sink), and the deliveries lost and duplicated as counted
 * at the sink (by webhook-id) once every job has ended. Rounds (BENCH_ROUNDS, default 2)
 * alternate the two modes. BENCH_WARMUP submissions (default 0) are posted and delivered
 * first, untimed, so that the processes are warm.
 */
import { jobsPrefix } from "../store/keys.ts";
import { type BenchService, startBenchService } from "./lib.ts";

const N = Number(Deno.env.get("BENCH_SUBMISSIONS") ?? "4000");
const IN_FLIGHT = Number(Deno.env.get("BENCH_IN_FLIGHT") ?? "40");
const PROCESSES = Number(Deno.env.get("BENCH_PROCESSES") ?? "2");
const DESTINATIONS = Number(Deno.env.get("BENCH_DESTINATIONS") ?? "2");
const ROUNDS = Number(Deno.env.get("BENCH_ROUNDS") ?? "2");
/** Submissions posted and delivered before the timed ones, to warm the processes up (default none). */
const WARMUP = Number(Deno.env.get("BENCH_WARMUP") ?? "0");
/**
 * How long to wait for the last arrivals, and then for every job to end (a job whose
 * result was lost is sent again after its lease, 120 s by default), before counting.
 */
const DRAIN_TIMEOUT_MS = Number(Deno.env.get("BENCH_DRAIN_SECONDS") ?? "150") * 1000;

const arrivals = new Map<string, number>(); // webhook-id → count
let lastArrival = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  const id = request.headers.get("webhook-id")!;
  arrivals.set(id, (arrivals.get(id) ?? 0) + 1);
  lastArrival = performance.now();
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}/hook`;
const body = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "Hello" });

interface RunResult {
  processes: number;
  acceptedMs: number;
  endToEndMs: number;
  lost: number;
  duplicated: number;
  refused: number;
}

/** Posts `count` submissions IN_FLIGHT at a time, alternately to each process; the ids accepted. */
async function post(
  service: BenchService,
  count: number,
): Promise<{ ids: string[]; refused: number }> {
  const ids: string[] = [];
  let refused = 0;
  let next = 0;
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next < count) {
      const origin = service.origins[next++ % service.origins.length];
      const response = await fetch(`${origin}/v1/f/${service.publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
      const answer = await response.json().catch(() => null);
      if (response.status === 202) ids.push(answer.submissionId);
      else refused++;
    }
  }));
  return { ids, refused };
}

/** Waits until every delivery of `ids` arrived or the deadline passed; how many are missing. */
async function arrived(service: BenchService, ids: string[], deadline: number): Promise<number> {
  const expected = ids.flatMap((id) => service.destinationIds.map((d) => `${id}.${d}`));
  const missing = () => expected.filter((id) => !arrivals.has(id)).length;
  while (missing() > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return missing();
}

async function run(processes: number): Promise<RunResult> {
  arrivals.clear();
  const service = await startBenchService(sinkUrl, {}, { processes, destinations: DESTINATIONS });
  try {
    if (WARMUP > 0) await arrived(service, (await post(service, WARMUP)).ids, Date.now() + 60_000);
    const start = performance.now();
    const { ids, refused } = await post(service, N);
    const acceptedMs = performance.now() - start;
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    const lost = await arrived(service, ids, deadline);
    const endToEndMs = lastArrival - start;
    // A second copy can come until every job has ended (one whose result was not
    // recorded is sent again when its lease expires), so count once none is left.
    const kv = await Deno.openKv(service.kvPath);
    try {
      while (Date.now() < deadline) {
        const jobs = await Array.fromAsync(kv.list({ prefix: jobsPrefix() }, { limit: 1 }));
        if (jobs.length === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    } finally {
      kv.close();
    }
    let duplicated = 0;
    for (const count of arrivals.values()) duplicated += count - 1;
    return { processes, acceptedMs, endToEndMs, lost, duplicated, refused };
  } finally {
    await service.stop();
  }
}

console.log(
  `bench:processes — ${N} submissions × ${DESTINATIONS} webhook destinations, ${IN_FLIGHT} in ` +
    `flight, 1 process against ${PROCESSES} on one KV file; ${ROUNDS} rounds; warm-up ${WARMUP}; ` +
    `${Deno.build.os}, ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ` +
    new Date().toISOString(),
);
const results: RunResult[] = [];
/** End-to-end ratio of several processes to one, per round (the two runs of a round are adjacent). */
const ratios: number[] = [];
const describe = (r: RunResult) =>
  `${r.processes} process${r.processes > 1 ? "es" : ""}: accepted in ` +
  `${(r.acceptedMs / 1000).toFixed(2)} s, end to end ${(r.endToEndMs / 1000).toFixed(2)} s; ` +
  `lost ${r.lost}, duplicated ${r.duplicated}, refused ${r.refused}`;
for (let round = 0; round < ROUNDS; round++) {
  const one = await run(1);
  console.log(describe(one));
  const many = await run(PROCESSES);
  console.log(describe(many));
  results.push(one, many);
  ratios.push(many.endToEndMs / one.endToEndMs);
}
await sink.shutdown();

for (const processes of [1, PROCESSES]) {
  const times = results.filter((r) => r.processes === processes).map((r) => r.endToEndMs / 1000);
  console.log(
    `${processes} process(es): end to end ${Math.min(...times).toFixed(2)}–` +
      `${Math.max(...times).toFixed(2)} s`,
  );
}
ratios.sort((a, b) => a - b);
console.log(
  `ratio ${PROCESSES} processes / 1 per round: ${ratios.map((r) => r.toFixed(2)).join(", ")}; ` +
    `median ${ratios[Math.floor(ratios.length / 2)].toFixed(2)} (target ≤ 1.5); ` +
    `lost ${results.reduce((n, r) => n + r.lost, 0)}, duplicated ` +
    `${results.reduce((n, r) => n + r.duplicated, 0)} in all (target 0)`,
);
