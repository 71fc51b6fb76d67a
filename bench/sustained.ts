/**
 * bench:sustained — offered load above capacity for BENCH_SECONDS (120 s): wrk floods
 * tenant X's form (two webhook destinations) from 50 connections, each request from its
 * own address through a trusted proxy header, while tenant Y posts a steady trickle
 * (10/s) to its own form (one webhook destination). The service runs as `deno task
 * start` does, with the production defaults (rate limit and backlog bound included).
 * Every 10 s it prints accepted/s and refused/s (from /metrics), delivered/s and the
 * backlog (counted at the sink), the time from acceptance to arrival for both tenants,
 * RSS and the KV file's size; at the end the drain time, and lost and duplicated
 * deliveries counted at the sink. BENCH_PROCESSES (default 1) runs that many processes on
 * one KV file: the flood is split between them (one wrk each), the trickle alternates,
 * the counters and the RSS column are their sums, and the peak RSS is given per process.
 */
import { peakRssMb, rssMb, runWrk, startBenchService } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "120");
const WINDOW_SECONDS = 10;
const TRICKLE_PER_SECOND = 10;
const CONNECTIONS = 50;
const DRAIN_LIMIT_MS = 600_000;
const PROCESSES = Number(Deno.env.get("BENCH_PROCESSES") ?? "1");

/** What one tenant's deliveries did in one window. */
interface Arrivals {
  count: number;
  /** Acceptance (the envelope's submittedAt) to arrival, ms. */
  latencies: number[];
}
const newArrivals = (): Arrivals => ({ count: 0, latencies: [] });
let window = { x: newArrivals(), y: newArrivals() };
const total = { x: 0, y: 0 };
const seen = new Set<string>();
let duplicates = 0;
const yLatencies: number[] = [];

const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  const envelope = await request.json();
  const tenant = new URL(request.url).pathname.endsWith("/y") ? "y" : "x";
  const key = `${envelope.submissionId}${new URL(request.url).pathname}`;
  if (seen.has(key)) duplicates++;
  else {
    seen.add(key);
    total[tenant]++;
    window[tenant].count++;
    const latency = Date.now() - Date.parse(envelope.metadata.submittedAt);
    window[tenant].latencies.push(latency);
    if (tenant === "y") yLatencies.push(latency);
  }
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}/hook`;

const service = await startBenchService(sinkUrl, {
  CLIENT_IP_HEADER: "x-forwarded-for",
  RATE_LIMIT_MAX: "60",
}, { otherTenant: "/y", processes: PROCESSES });
const { origins, children } = service;
const maxJobs = Number(Deno.env.get("BACKLOG_MAX_JOBS") ?? "20000");
const orgMaxJobs = Math.floor(maxJobs * Number(Deno.env.get("BACKLOG_ORG_SHARE") ?? "0.5"));

/** Accepted and refused submissions so far, from the service's /metrics. */
async function counters() {
  const texts = await Promise.all(
    origins.map(async (origin) => await (await fetch(`${origin}/metrics`)).text()),
  );
  const text = texts.join("\n");
  const sum = (name: string) =>
    text.split("\n").filter((line) => line.startsWith(name)).reduce(
      (sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)),
      0,
    );
  return {
    accepted: sum("formrelay_submissions_accepted_total"),
    refused: sum("formrelay_submissions_refused_total"),
  };
}

async function kvMb(): Promise<number> {
  let bytes = 0;
  for (const suffix of ["", "-wal"]) {
    try {
      bytes += (await Deno.stat(service.kvPath + suffix)).size;
    } catch { /* not there */ }
  }
  return Math.round(bytes / 1024 / 1024);
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

// Tenant Y's trickle: one submission every 100 ms, whatever happens to the flood.
const y = { accepted: 0, refused: 0 };
let trickling = true;
const trickle = (async () => {
  let next = performance.now();
  let visitor = 0;
  while (trickling) {
    next += 1000 / TRICKLE_PER_SECOND;
    visitor++;
    // Each from its own visitor's address, as behind the CDN.
    const address = `10.200.${Math.floor(visitor / 256) % 256}.${visitor % 256}`;
    const origin = origins[visitor % origins.length];
    const response = await fetch(`${origin}/v1/f/${service.other!.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-forwarded-for": address },
      body: JSON.stringify({ name: "Grace", message: "steady" }),
    });
    await response.body?.cancel();
    if (response.status === 202) y.accepted++;
    else y.refused++;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - performance.now())));
  }
})();

const body = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "flood" });
const started = performance.now();
const flood = Promise.all(origins.map((origin) =>
  runWrk(`${origin}/v1/f/${service.publicKey}`, {
    connections: Math.ceil(CONNECTIONS / PROCESSES),
    seconds: SECONDS,
    body,
    distinctClients: true,
  })
)).then((runs) => ({
  requestsPerSecond: runs.reduce((sum, run) => sum + run.requestsPerSecond, 0),
  non2xx: runs.reduce((sum, run) => sum + run.non2xx, 0),
  errors: runs.map((run) => run.errors).filter((e) => e !== null).join("; ") || null,
}));
let floodOver = false;
flood.then(() => floodOver = true, () => floodOver = true);

console.log(
  `bench:sustained — ${PROCESSES} process(es) on one KV file; ` +
    `wrk -c${CONNECTIONS} -d${SECONDS}s on tenant X's form (2 webhooks), ` +
    `tenant Y ${TRICKLE_PER_SECOND}/s (1 webhook); backlog bound ${maxJobs} jobs, ` +
    `${orgMaxJobs} per organization`,
);
console.log(
  "  t s  accepted/s  refused/s  delivered/s  backlog  X p50/p99 ms     Y p50/p99 ms   RSS MB  KV MB",
);
const windows: { delivered: number; backlog: number; rss: number }[] = [];
let before = await counters();
let yBefore = { ...y };
while (!floodOver) {
  const windowEnd = started + (windows.length + 1) * WINDOW_SECONDS * 1000;
  await Promise.race([
    flood.catch(() => {}),
    new Promise((resolve) => setTimeout(resolve, Math.max(0, windowEnd - performance.now()))),
  ]);
  if (floodOver) break;
  const now = await counters();
  const { x, y: yWindow } = window;
  window = { x: newArrivals(), y: newArrivals() };
  const yAccepted = y.accepted - yBefore.accepted;
  const xAccepted = now.accepted - before.accepted - yAccepted;
  const refused = now.refused - before.refused - (y.refused - yBefore.refused);
  const backlog = 2 * (now.accepted - y.accepted) - total.x + (y.accepted - total.y);
  const rss = (await Promise.all(children.map((child) => rssMb(child.pid)))).reduce(
    (sum, mb) => sum + mb,
    0,
  );
  const delivered = (x.count + yWindow.count) / WINDOW_SECONDS;
  windows.push({ delivered, backlog, rss });
  const pair = (a: Arrivals) =>
    `${percentile(a.latencies, 0.5).toFixed(0)}/${percentile(a.latencies, 0.99).toFixed(0)}`;
  console.log(
    `${String(windows.length * WINDOW_SECONDS).padStart(5)}  ${
      (xAccepted / WINDOW_SECONDS).toFixed(0).padStart(10)
    }  ${(refused / WINDOW_SECONDS).toFixed(0).padStart(9)}  ${
      delivered.toFixed(0).padStart(11)
    }  ${String(backlog).padStart(7)}  ${pair(x).padStart(13)}  ${pair(yWindow).padStart(13)}  ${
      String(rss).padStart(6)
    }  ${String(await kvMb()).padStart(5)}`,
  );
  before = now;
  yBefore = { ...y };
}
const wrk = await flood;
trickling = false;
await trickle;

// The drain: everything accepted arrives (or the limit passes).
const loadEnd = performance.now();
const final = await counters();
const expected = { x: 2 * (final.accepted - y.accepted), y: y.accepted };
const leftAtEnd = expected.x - total.x + expected.y - total.y;
const deadline = Date.now() + DRAIN_LIMIT_MS;
while ((total.x < expected.x || total.y < expected.y) && Date.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 50));
}
const drainSeconds = (performance.now() - loadEnd) / 1000;
const lost = expected.x - total.x + expected.y - total.y;
// Per process: the target is one process's.
const peakRss = (await Promise.all(children.map((child) => peakRssMb(child.pid)))).join(" + ");
await service.stop();
await sink.shutdown();

const later = windows.slice(1);
const peak = Math.max(...windows.map((w) => w.delivered));
const lowest = Math.min(...later.map((w) => w.delivered));
console.log(
  `flood: wrk ${wrk.requestsPerSecond.toFixed(0)} req/s offered, non-2xx ${wrk.non2xx}${
    wrk.errors ? `, ${wrk.errors}` : ""
  }; tenant Y: ${y.accepted} accepted, ${y.refused} refused`,
);
console.log(
  `delivered/s: peak ${peak.toFixed(0)}, lowest after the first window ${lowest.toFixed(0)} ` +
    `(${(lowest / peak * 100).toFixed(0)} % of peak; target ≥ 80 %)`,
);
console.log(
  `backlog at most ${
    Math.max(...windows.map((w) => w.backlog))
  } jobs (bounds: ${maxJobs}, ${orgMaxJobs} per organization); ` +
    `tenant Y acceptance → arrival p50 ${percentile(yLatencies, 0.5)} ms, p99 ${
      percentile(yLatencies, 0.99)
    } ms (target < 5 000); peak RSS ${peakRss} MB (target < 300)`,
);
console.log(
  `drain after the load: ${leftAtEnd} deliveries in ${drainSeconds.toFixed(1)} s (${
    (leftAtEnd / drainSeconds).toFixed(0)
  }/s with nothing else to do); lost ${lost}, duplicated ${duplicates} ` +
    `(of ${expected.x + expected.y} deliveries accepted)`,
);
