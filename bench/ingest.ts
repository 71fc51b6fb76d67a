/**
 * bench:ingest — formrelay's ingestion against a bare Deno.serve on the same machine.
 * Starts main.ts on a file-backed KV with a form of two enabled webhook destinations
 * (delivered to a local sink while the load runs), drives both with wrk (50 connections,
 * 10 s, a 200-byte JSON body), and prints req/s, p50/p99, peak RSS and the ratio.
 */
import { loadConfig } from "../config.ts";
import { startService } from "../service.ts";
import { createOrg } from "../store/orgs.ts";
import { freePort, MAIN, peakRssMb, runWrk, spawnDeno, waitUntilUp } from "./lib.ts";

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

const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-" });
const env = {
  KV_PATH: `${dir}/formrelay.kv`,
  ALLOW_PRIVATE_DESTINATIONS: "true",
  // wrk posts from one address: the per-IP limit would answer 429 after 60.
  RATE_LIMIT_MAX: "0",
  LOG_LEVEL: Deno.env.get("LOG_LEVEL") ?? "info",
  ...(Deno.env.get("DELIVERY_CONCURRENCY")
    ? { DELIVERY_CONCURRENCY: Deno.env.get("DELIVERY_CONCURRENCY")! }
    : {}),
};
const setup = await startService({ ...loadConfig({ ...env, LOG_LEVEL: "silent" }) }, {
  deliver: false,
});
const { tenantKey } = await createOrg(setup.db, "Bench");
await setup.close();

const port = freePort();
const service = spawnDeno([MAIN], { ...env, PORT: String(port) });
const origin = `http://127.0.0.1:${port}`;
await waitUntilUp(`${origin}/healthz`);
const admin = (path: string, payload: unknown) =>
  fetch(`${origin}/v1/admin${path}`, {
    method: "POST",
    headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
    body: JSON.stringify(payload),
  }).then((r) => r.json());
const { form } = await admin("/forms", { name: "Bench" });
for (const path of ["/a", "/b"]) {
  await admin(`/forms/${form.id}/destinations`, {
    type: "webhook",
    config: { url: sinkUrl + path },
  });
}

const formrelay = await runWrk(`${origin}/v1/f/${form.publicKey}`, {
  connections: CONNECTIONS,
  seconds: SECONDS,
  body,
});
const formrelayRss = await peakRssMb(service.pid);
service.kill("SIGTERM");
await service.status;

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
await Deno.remove(dir, { recursive: true });

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
    `(target ≥ 0.10, p99 < 50 ms, RSS < 200 MB); deliveries seen at the sink: ${delivered}`,
);
