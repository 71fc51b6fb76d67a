/**
 * bench:ingest — formrelay's ingestion against a bare Deno.serve on the same machine.
 * Starts main.ts on a file-backed KV with a form of two enabled webhook destinations
 * (a local sink receives the deliveries, which a burst holds back), drives both with wrk
 * (50 connections, BENCH_SECONDS = 10 s, a 200-byte JSON body), and prints req/s,
 * p50/p99, peak RSS and the ratio.
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

// A local receiver for the deliveries that run during the load.
let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  delivered++;
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}/hook`;

const service = await startBenchService(sinkUrl, {
  LOG_LEVEL: Deno.env.get("LOG_LEVEL") ?? "info",
  DELIVERY_CONCURRENCY: Deno.env.get("DELIVERY_CONCURRENCY") ?? "32",
});

const formrelay = await runWrk(`${service.origin}/v1/f/${service.publicKey}`, {
  connections: CONNECTIONS,
  seconds: SECONDS,
  body,
});
const formrelayRss = await peakRssMb(service.child.pid);
await service.stop();

const barePort = freePort();
const bare = spawnDeno([new URL("./bare_server.ts", import.meta.url).pathname], {
  PORT: String(barePort),
});
await waitUntilUp(`http://127.0.0.1:${barePort}/`);
const baseline = await runWrk(`http://127.0.0.1:${barePort}/`, {
  connections: CONNECTIONS,
  seconds: SECONDS,
  body,
});
const bareRss = await peakRssMb(bare.pid);
bare.kill("SIGTERM");
await bare.status;
await sink.shutdown();

const row = (name: string, r: typeof baseline, rss: number) =>
  `${name.padEnd(22)} ${r.requestsPerSecond.toFixed(0).padStart(8)} req/s  p50 ${
    r.p50Ms.toFixed(2)
  } ms  p99 ${r.p99Ms.toFixed(2)} ms  peak RSS ${rss} MB  non-2xx ${r.non2xx}${
    r.errors ? `  ${r.errors}` : ""
  }`;
console.log(`bench:ingest — wrk -c${CONNECTIONS} -d${SECONDS}s, 200-byte JSON body`);
console.log(row("formrelay (2 dests)", formrelay, formrelayRss));
console.log(row("bare Deno.serve 202", baseline, bareRss));
console.log(
  `ratio ${(formrelay.requestsPerSecond / baseline.requestsPerSecond).toFixed(3)}  ` +
    `(target ≥ 0.10, p99 < 50 ms, RSS < 200 MB); deliveries seen at the sink meanwhile: ${delivered}` +
    ` (a burst holds them back for up to 30 s)`,
);
