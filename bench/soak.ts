/**
 * bench:soak — formrelay under a steady load for a long time. Starts main.ts on a
 * file-backed KV with a form of two webhook destinations and one SMTP destination (local
 * peers in this process), posts submissions open-loop at SOAK_RATE per second (200) for
 * SOAK_SECONDS (600), and every 30 s prints throughput, ingestion p50/p99, the child's RSS
 * and the delivery backlog (accepted × destinations − delivered). Ends with the verdicts:
 * RSS growth after warm-up (target ≤ 20 %), backlog growth, p99 stability.
 */
import { startSmtpServer } from "../tests/helpers/smtp_server.ts";
import {
  adminClient,
  createFormWith,
  loopbackSmtpConfig,
  percentile,
  prepareWorkspace,
} from "../tests/reliability/helpers/cluster.ts";
import { START_TASK } from "../tools/start_task.ts";
import { freePort, MAIN, rssMb, spawnDeno, waitUntilUp } from "./lib.ts";

const SECONDS = Number(Deno.env.get("SOAK_SECONDS") ?? "600");
const RATE = Number(Deno.env.get("SOAK_RATE") ?? "200");
const WINDOW_MS = 30_000;
const WARMUP_MS = Math.min(60_000, (SECONDS * 1000) / 5);
const MAX_IN_FLIGHT = 500;

let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  delivered++;
  return new Response("ok");
});
const smtp = await startSmtpServer({ mode: "off", discard: true });
const workspace = await prepareWorkspace(1, {
  // Production timings; only what a single-address load and local peers need.
  DELIVERY_LEASE_MS: "120000",
  HTTP_TIMEOUT_MS: "15000",
  SMTP_TIMEOUT_MS: "60000",
  RETRY_SCHEDULE_SECONDS: "5,300,1800,7200,18000,36000,36000",
  SWEEP_INTERVAL_SECONDS: "15",
});
const port = freePort();
const child = spawnDeno([START_TASK.v8Flags, MAIN], {
  ...START_TASK.env,
  ...workspace.env,
  PORT: String(port),
}, { permissions: "start" });
const origin = `http://127.0.0.1:${port}`;
await waitUntilUp(`${origin}/healthz`);
const admin = adminClient(() => origin, workspace.orgs[0].tenantKey);
const sinkUrl = `http://127.0.0.1:${sink.addr.port}`;
const form = await createFormWith(admin, "Soak", [
  { type: "webhook", config: { url: `${sinkUrl}/a` } },
  { type: "webhook", config: { url: `${sinkUrl}/b` } },
  { type: "smtp", config: loopbackSmtpConfig(smtp.port) },
]);
const destinations = form.destinationIds.length;
const url = `${origin}/v1/f/${form.publicKey}`;
const body = JSON.stringify({
  name: "Ada Lovelace",
  email: "ada@example.com",
  message: "x".repeat(120),
});

interface Window {
  at: number;
  sent: number;
  accepted: number;
  failed: number;
  latencies: number[];
}
const windows: Window[] = [];
const newWindow = (at: number): Window => ({ at, sent: 0, accepted: 0, failed: 0, latencies: [] });
let window = newWindow(0);
let accepted = 0;
let inFlight = 0;
let skipped = 0;
const samples: { at: number; rss: number; backlog: number }[] = [];
const backlog = () => accepted * destinations - delivered - smtp.received;

console.log(
  `bench:soak — ${RATE} submissions/s for ${SECONDS} s, 3 destinations (2 webhooks, 1 SMTP), ` +
    `warm-up ${
      WARMUP_MS / 1000
    } s, Deno ${Deno.version.deno}, ${navigator.hardwareConcurrency} cores`,
);
console.log("   t (s)  sent/s  p50 ms  p99 ms  failed  RSS MB  backlog");
const start = performance.now();
const sampler = setInterval(async () => {
  samples.push({ at: performance.now() - start, rss: await rssMb(child.pid), backlog: backlog() });
}, 5_000);
for (let i = 0; i < SECONDS * RATE; i++) {
  const due = start + (i * 1000) / RATE;
  const wait = due - performance.now();
  if (wait > 1) await new Promise((r) => setTimeout(r, wait));
  const now = performance.now() - start;
  if (now - window.at >= WINDOW_MS) {
    windows.push(window);
    report(window);
    window = newWindow(window.at + WINDOW_MS);
  }
  if (inFlight >= MAX_IN_FLIGHT) {
    skipped++;
    continue;
  }
  const current = window;
  current.sent++;
  inFlight++;
  const sentAt = performance.now();
  fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body })
    .then(async (response) => {
      await response.body?.cancel();
      current.latencies.push(performance.now() - sentAt);
      if (response.status === 202) {
        current.accepted++;
        accepted++;
      } else current.failed++;
    })
    .catch(() => current.failed++)
    .finally(() => inFlight--);
}
const deadline = Date.now() + 30_000;
while (inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
windows.push(window);
report(window);
clearInterval(sampler);

// Drain: how long the backlog takes to reach zero after the load stops.
const drainStart = Date.now();
while (backlog() > 0 && Date.now() - drainStart < 120_000) {
  await new Promise((r) => setTimeout(r, 100));
}
const drainMs = Date.now() - drainStart;
const finalRss = await rssMb(child.pid);
child.kill("SIGTERM");
await child.status;
await sink.shutdown();
await smtp.close();
await workspace.remove();

function report(w: Window) {
  const last = samples.at(-1);
  console.log(
    `${String(Math.round((w.at + WINDOW_MS) / 1000)).padStart(8)}  ${
      (w.sent / (WINDOW_MS / 1000)).toFixed(0).padStart(6)
    }  ${percentile(w.latencies, 50).toFixed(1).padStart(6)}  ${
      percentile(w.latencies, 99).toFixed(1).padStart(6)
    }  ${String(w.failed).padStart(6)}  ${String(last?.rss ?? "-").padStart(6)}  ${
      String(last?.backlog ?? "-").padStart(7)
    }`,
  );
}

const after = samples.filter((s) => s.at >= WARMUP_MS);
const warmRss = after[0]?.rss ?? NaN;
const maxRss = Math.max(...after.map((s) => s.rss));
const growth = ((maxRss - warmRss) / warmRss) * 100;
const steady = windows.filter((w) => w.at >= WARMUP_MS && w.latencies.length > 0);
const p99s = steady.map((w) => percentile(w.latencies, 99));
const half = Math.floor(after.length / 2);
const backlogFirstHalf = Math.max(0, ...after.slice(0, half).map((s) => s.backlog));
const backlogSecondHalf = Math.max(0, ...after.slice(half).map((s) => s.backlog));
const all = windows.flatMap((w) => w.latencies);
console.log(
  `accepted ${accepted} of ${windows.reduce((n, w) => n + w.sent, 0)} sent (${skipped} skipped ` +
    `at ${MAX_IN_FLIGHT} in flight), failed ${windows.reduce((n, w) => n + w.failed, 0)}; ` +
    `deliveries ${delivered} webhook + ${smtp.received} SMTP; backlog drained ${drainMs} ms after the load`,
);
console.log(
  `ingestion latency overall p50 ${percentile(all, 50).toFixed(1)} ms, p99 ${
    percentile(all, 99).toFixed(1)
  } ms; p99 per 30 s window after warm-up ${Math.min(...p99s).toFixed(1)}–${
    Math.max(...p99s).toFixed(1)
  } ms`,
);
console.log(
  `RSS after warm-up ${warmRss} MB, max after ${maxRss} MB (${
    growth.toFixed(1)
  } %, target ≤ 20 %), ` +
    `at the end ${finalRss} MB; backlog max ${backlogFirstHalf} (first half) / ${backlogSecondHalf} ` +
    `(second half of the steady state)`,
);
