/**
 * bench:flood — whether deliveries keep up with acceptance through a flood to receivers
 * that answer at once. wrk floods one form (two webhook destinations on a local
 * `Deno.serve` that answers 200 at once) from 50 connections for BENCH_SECONDS (40), the
 * service as `deno task start` runs it with the rate limit off. Every second it prints
 * accepted/s (from /metrics), delivered/s (counted at the receiver), the deliveries in
 * flight and the concurrency the pace allows (summed over both destinations, from
 * /metrics) and the backlog (accepted × 2 − delivered). At the end: the flood's first and
 * second halves side by side (in flight and delivered/s; the second's share of the
 * first), and accepted/s against delivered/s in the second half.
 */
import { runWrk, startBenchService } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "40");
const CONNECTIONS = 50;

let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  delivered++;
  return new Response("ok");
});
const service = await startBenchService(`http://127.0.0.1:${sink.addr.port}/hook`, {
  LOG_LEVEL: "warn",
});

/** Sums of the /metrics lines starting with each name. */
async function metrics() {
  const text = await (await fetch(`${service.origin}/metrics`)).text();
  const sum = (prefix: string) =>
    text.split("\n").filter((line) => line.startsWith(prefix)).reduce(
      (sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)),
      0,
    );
  return {
    accepted: sum("formrelay_submissions_accepted_total"),
    refused: sum("formrelay_submissions_refused_total"),
    inFlight: sum('formrelay_destination_pace{measure="in_flight"'),
    concurrency: sum('formrelay_destination_pace{measure="concurrency"'),
  };
}

console.log(
  `bench:flood — wrk -c${CONNECTIONS} -d${SECONDS}s on one form (2 webhooks, instant receiver); ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ${
      new Date().toISOString()
    }`,
);
console.log("  t s  accepted/s  refused/s  delivered/s  in flight  concurrency  backlog");
const body = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "flood" });
let over = false;
const flood = runWrk(`${service.origin}/v1/f/${service.publicKey}`, {
  connections: CONNECTIONS,
  seconds: SECONDS,
  body,
}).finally(() => over = true);
const started = performance.now();
const rows: { accepted: number; delivered: number; inFlight: number }[] = [];
let before = { ...(await metrics()), delivered };
while (!over) {
  const next = started + (rows.length + 1) * 1000;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - performance.now())));
  if (over) break;
  const now = { ...(await metrics()), delivered };
  const row = {
    accepted: now.accepted - before.accepted,
    delivered: now.delivered - before.delivered,
    inFlight: now.inFlight,
  };
  rows.push(row);
  console.log(
    `${String(rows.length).padStart(5)}  ${String(row.accepted).padStart(10)}  ${
      String(now.refused - before.refused).padStart(9)
    }  ${String(row.delivered).padStart(11)}  ${String(now.inFlight).padStart(9)}  ${
      String(now.concurrency).padStart(11)
    }  ${String(2 * now.accepted - now.delivered).padStart(7)}`,
  );
  before = now;
}
const wrk = await flood;
await service.stop();
await sink.shutdown();

const half = Math.floor(rows.length / 2);
const mean = (list: typeof rows, key: keyof (typeof rows)[0]) =>
  list.reduce((sum, row) => sum + row[key], 0) / Math.max(1, list.length);
const [first, second] = [rows.slice(0, half), rows.slice(half)];
const line = (name: string, key: keyof (typeof rows)[0]) =>
  `${name}: first half ${mean(first, key).toFixed(0)}, second ${mean(second, key).toFixed(0)} ` +
  `(${(mean(second, key) / mean(first, key)).toFixed(2)} of the first)`;
console.log(line("in flight", "inFlight"));
console.log(line("delivered/s", "delivered"));
console.log(
  `second half: accepted ${mean(second, "accepted").toFixed(0)}/s, ` +
    `delivered ${(mean(second, "delivered") / 2).toFixed(0)} submissions/s ` +
    `(${(mean(second, "delivered") / 2 / mean(second, "accepted")).toFixed(2)} of acceptance); ` +
    `wrk ${wrk.requestsPerSecond.toFixed(0)} req/s, non-2xx ${wrk.non2xx}`,
);
