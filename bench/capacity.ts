/**
 * bench:capacity — a receiver at capacity, with one process and with several on one KV
 * file. The receiver answers in 20 ms, but `503` (no Retry-After) whenever more than
 * CAPACITY (20) requests are in flight at it. main.ts runs as `deno task start` does,
 * with one form of one webhook destination at that receiver; BENCH_SUBMISSIONS (default
 * 1 000) are posted 50 at a time, alternately to each process. Each round runs one
 * process, then BENCH_PROCESSES (default 4); BENCH_ROUNDS rounds (default 1).
 *
 * Prints per run the attempts, the `503`s and their share of attempts (target ≤ 5 %),
 * how many were delivered (target all), the most requests in flight at the receiver and
 * the time from the first post to the last delivery.
 */
import { type BenchService, startBenchService } from "./lib.ts";

const N = Number(Deno.env.get("BENCH_SUBMISSIONS") ?? "1000");
const PROCESSES = Number(Deno.env.get("BENCH_PROCESSES") ?? "4");
const ROUNDS = Number(Deno.env.get("BENCH_ROUNDS") ?? "1");
const CAPACITY = 20;
const LATENCY_MS = 20;
const DRAIN_TIMEOUT_MS = 120_000;

let attempts = 0;
let refused = 0;
let inFlight = 0;
let maxInFlight = 0;
let lastDelivery = 0;
let firstAttempt = 0;
/** Refusals in the first second of a run (the processes' start) and after. */
let refusedFirstSecond = 0;
const refusedAt: number[] = [];
const delivered = new Set<string>();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  if (attempts++ === 0) firstAttempt = performance.now();
  inFlight++;
  maxInFlight = Math.max(maxInFlight, inFlight);
  try {
    if (inFlight > CAPACITY) {
      refused++;
      if (performance.now() - firstAttempt < 1000) refusedFirstSecond++;
      refusedAt.push(Math.round(performance.now() - firstAttempt));
      return new Response("busy", { status: 503 });
    }
    await sleep(LATENCY_MS);
    delivered.add(request.headers.get("webhook-id")!);
    lastDelivery = performance.now();
    return new Response("ok");
  } finally {
    inFlight--;
  }
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}`;

async function post(service: BenchService): Promise<number> {
  let next = 0;
  let accepted = 0;
  await Promise.all(Array.from({ length: 50 }, async () => {
    while (next < N) {
      const origin = service.origins[next++ % service.origins.length];
      const response = await fetch(`${origin}/v1/f/${service.publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "Ada", message: "Hello" }),
      });
      await response.body?.cancel();
      if (response.status === 202) accepted++;
    }
  }));
  return accepted;
}

async function run(processes: number) {
  attempts =
    refused =
    maxInFlight =
    refusedFirstSecond =
      0;
  delivered.clear();
  const service = await startBenchService(sinkUrl, { LOG_LEVEL: "warn" }, {
    processes,
    destinations: 1,
  });
  try {
    const start = performance.now();
    const accepted = await post(service);
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    while (delivered.size < accepted && Date.now() < deadline) await sleep(50);
    const seconds = (lastDelivery - start) / 1000;
    console.log(
      `${processes} process${processes > 1 ? "es" : ""}: ${delivered.size} of ${accepted} ` +
        `delivered in ${seconds.toFixed(2)} s; ${attempts} attempts, ${refused} refused (503) = ` +
        `${
          (100 * refused / Math.max(1, attempts)).toFixed(1)
        } % (target ≤ 5 %), ${refusedFirstSecond} in the first second; ` +
        `most in flight ${maxInFlight}`,
    );
    if (Deno.env.get("BENCH_VERBOSE")) console.log(`  refusals at (ms): ${refusedAt.join(" ")}`);
  } finally {
    refusedAt.length = 0;
    await service.stop();
  }
}

console.log(
  `bench:capacity — ${N} submissions to a receiver answering in ${LATENCY_MS} ms, 503 past ` +
    `${CAPACITY} in flight; 1 process and ${PROCESSES}; ${ROUNDS} round(s); ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ${
      new Date().toISOString()
    }`,
);
for (let round = 0; round < ROUNDS; round++) {
  await run(1);
  await run(PROCESSES);
}
await sink.shutdown();
