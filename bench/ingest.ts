/**
 * bench:ingest — formrelay's ingestion against a bare Deno.serve on the same machine.
 * Starts main.ts as `deno task start` does, with the production defaults (rate limit
 * on) behind a trusted proxy header (CLIENT_IP_HEADER=x-forwarded-for): wrk gives each
 * request its own client address, as a CDN in front would. A second run turns the
 * rate limit off. The backlog bound is raised (BACKLOG_MAX_JOBS, one organization may
 * fill it): with the default the 10 s run would fill it in under two seconds and then
 * measure refusals, which bench:sustained is for. Each runs on a fresh file-backed KV with a form of two enabled
 * webhook destinations (a local sink receives the deliveries, which a burst holds
 * back); wrk drives 50 connections for BENCH_SECONDS (10 s) with a 200-byte JSON body,
 * and the bare server gets the same script. Prints req/s, p50/p99, peak RSS and ratios.
 */
import { freePort, peakRssMb, runWrk, spawnDeno, startBenchService, waitUntilUp } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "10");
const CONNECTIONS = 50;
const prefix = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "" });
const body = JSON.stringify({
  name: "Ada Lovelace",
  email: "ada@example.com",
  message: "x".repeat(200 - prefix.length),
});
if (new TextEncoder().encode(body).length !== 200) throw new Error("body is not 200 bytes");
const load = { connections: CONNECTIONS, seconds: SECONDS, body, distinctClients: true };

// A local receiver for the deliveries that run during the load.
let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  delivered++;
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}/hook`;

/** One run of formrelay with `env` over the defaults. */
async function runFormrelay(env: Record<string, string>) {
  const service = await startBenchService(sinkUrl, {
    LOG_LEVEL: Deno.env.get("LOG_LEVEL") ?? "info",
    CLIENT_IP_HEADER: "x-forwarded-for",
    BACKLOG_MAX_JOBS: "1000000",
    BACKLOG_ORG_SHARE: "1",
    ...env,
  });
  const result = await runWrk(`${service.origin}/v1/f/${service.publicKey}`, load);
  const rss = await peakRssMb(service.child.pid);
  await service.stop();
  return { result, rss };
}

// The defaults as users run them: the rate limit on (60 per form and client per 10 min).
const defaults = await runFormrelay({ RATE_LIMIT_MAX: "60" });
const limitOff = await runFormrelay({ RATE_LIMIT_MAX: "0" });

const barePort = freePort();
const bare = spawnDeno([new URL("./bare_server.ts", import.meta.url).pathname], {
  PORT: String(barePort),
});
await waitUntilUp(`http://127.0.0.1:${barePort}/`);
const baseline = await runWrk(`http://127.0.0.1:${barePort}/`, load);
const bareRss = await peakRssMb(bare.pid);
bare.kill("SIGTERM");
await bare.status;
await sink.shutdown();

type Result = typeof baseline;
const row = (name: string, r: Result, rss: number) =>
  `${name.padEnd(26)} ${r.requestsPerSecond.toFixed(0).padStart(8)} req/s  p50 ${
    r.p50Ms.toFixed(2)
  } ms  p99 ${r.p99Ms.toFixed(2)} ms  peak RSS ${rss} MB  non-2xx ${r.non2xx}${
    r.errors ? `  ${r.errors}` : ""
  }`;
const ratio = (r: Result) => (r.requestsPerSecond / baseline.requestsPerSecond).toFixed(3);
console.log(
  `bench:ingest — wrk -c${CONNECTIONS} -d${SECONDS}s, 200-byte JSON body, ` +
    `a distinct X-Forwarded-For per request`,
);
console.log(row("formrelay, defaults", defaults.result, defaults.rss));
console.log(row("formrelay, rate limit off", limitOff.result, limitOff.rss));
console.log(row("bare Deno.serve 202", baseline, bareRss));
console.log(
  `ratio ${ratio(defaults.result)} with the defaults (target ≥ 0.12), ` +
    `${ratio(limitOff.result)} with the rate limit off; p99 < 50 ms, RSS < 200 MB; ` +
    `deliveries seen at the sink meanwhile: ${delivered} (a burst holds them back for its first 10 s)`,
);
