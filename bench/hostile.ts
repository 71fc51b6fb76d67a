/**
 * bench:hostile — legitimate submissions beside hostile traffic, for BENCH_SECONDS (60 s).
 *
 * main.ts runs as `deno task start` does (default limits, rate limit on, the
 * connection's address as the client's) with one form of one webhook destination.
 * Meanwhile, each from its own loopback addresses:
 * - visitors: LEGIT_PER_SECOND (20) submissions a second, each on a new connection from
 *   one of 250 addresses (127.0.1.x), as people would post;
 * - slow loris: 500 connections held idle and 200 trickling a 128 KB body a byte a
 *   second (127.0.0.2), each reopened when the server closes it;
 * - a junk flood: 8 loops posting malformed JSON, wrong content types and unknown keys
 *   as fast as answered (127.0.2.x);
 * - large bodies: 4 loops posting 128 KB submissions (127.0.3.x).
 * Prints the visitors' success rate and p50/p99, peak RSS, what the hostile traffic got,
 * and checks that every accepted visitor's submission reached the sink.
 */
import { percentile } from "../tests/reliability/helpers/cluster.ts";
import { holdIdle, holdSlowBody, watchRss } from "../tests/reliability/helpers/attackers.ts";
import { startBenchService } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "60");
const LEGIT_PER_SECOND = Number(Deno.env.get("LEGIT_PER_SECOND") ?? "20");

/** Visitors' submissions delivered (the 128 KB ones are delivered too, but not counted). */
let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  if ((await request.text()).includes('"message":"visit ')) delivered++;
  return new Response("ok");
});
const service = await startBenchService(`http://127.0.0.1:${sink.addr.port}/hook`, {
  RATE_LIMIT_MAX: "60",
  LOG_LEVEL: "warn",
});
const port = Number(new URL(service.origin).port);
const url = `${service.origin}/v1/f/${service.publicKey}`;
// startBenchService adds two destinations; every accepted submission is delivered twice.
const DESTINATIONS = service.destinationIds.length;
const rss = watchRss(service.child.pid);
const stop = new AbortController();
const deadline = Date.now() + SECONDS * 1000;

/** Status counts per kind of traffic. */
const statuses: Record<string, Record<string, number>> = {};
function tally(kind: string, status: number | string) {
  const counts = statuses[kind] ??= {};
  counts[status] = (counts[status] ?? 0) + 1;
}

/** Posts until the deadline, one request at a time, from `client`. */
async function flood(
  kind: string,
  client: Deno.HttpClient,
  request: () => RequestInit & { to?: string },
) {
  while (Date.now() < deadline) {
    const init = request();
    try {
      const response = await fetch(init.to ?? url, { ...init, client });
      await response.body?.cancel();
      tally(kind, response.status);
    } catch {
      tally(kind, "error");
    }
  }
}

const junk: (() => RequestInit & { to?: string })[] = [
  () => ({ method: "POST", headers: { "content-type": "application/json" }, body: "{not json" }),
  () => ({ method: "POST", headers: { "content-type": "text/plain" }, body: "hello" }),
  () => ({
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
    to: `${service.origin}/v1/f/pk_${crypto.randomUUID().replaceAll("-", "")}`,
  }),
  () => ({ method: "POST", headers: { "content-type": "application/json" }, body: "[[[[[[[[" }),
];
const large = JSON.stringify({ message: "x".repeat(131_000) });
const clients = (prefix: string, count: number) =>
  Array.from(
    { length: count },
    (_, i) => Deno.createHttpClient({ localAddress: `${prefix}${i + 2}` }),
  );

const junkClients = clients("127.0.2.", 8);
const largeClients = clients("127.0.3.", 4);
const idle = { closed: 0 };
const slow = { closed: 0 };
const hostile = [
  ...Array.from({ length: 500 }, () => holdIdle(port, stop.signal, idle)),
  ...Array.from(
    { length: 200 },
    () => holdSlowBody(port, new URL(url).pathname, stop.signal, slow),
  ),
  ...junkClients.map((client, i) => flood("junk", client, () => junk[i % junk.length]())),
  ...largeClients.map((client) =>
    flood("large", client, () => ({
      method: "POST",
      headers: { "content-type": "application/json" },
      body: large,
    }))
  ),
];

// Visitors: a steady rate, each on a new connection from one of 250 addresses.
const visitorClients = Array.from(
  { length: 250 },
  (_, i) => Deno.createHttpClient({ localAddress: `127.0.1.${i + 1}`, poolMaxIdlePerHost: 0 }),
);
const visits: Promise<void>[] = [];
const latencies: number[] = [];
let accepted = 0;
for (let n = 0; Date.now() < deadline; n++) {
  const started = performance.now();
  visits.push((async () => {
    try {
      const response = await fetch(url, {
        client: visitorClients[n % visitorClients.length],
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "Ada", email: "ada@example.com", message: `visit ${n}` }),
      });
      await response.body?.cancel();
      tally("visitors", response.status);
      if (response.status === 202) {
        accepted++;
        latencies.push(performance.now() - started);
      }
    } catch {
      tally("visitors", "error");
    }
  })());
  await new Promise((resolve) => setTimeout(resolve, 1000 / LEGIT_PER_SECOND));
}
await Promise.all(visits);
stop.abort();
await Promise.all(hostile);
const peak = await rss.stop();

// Every accepted visit is delivered (to each destination) once the attack is over.
const drainDeadline = Date.now() + 60_000;
while (delivered < accepted * DESTINATIONS && Date.now() < drainDeadline) {
  await new Promise((resolve) => setTimeout(resolve, 100));
}
[...junkClients, ...largeClients, ...visitorClients].forEach((c) => c.close());
await service.stop();
await sink.shutdown();

const sent = Object.values(statuses.visitors ?? {}).reduce((a, b) => a + b, 0);
console.log(`bench:hostile — ${SECONDS} s, ${LEGIT_PER_SECOND} visitors/s beside hostile traffic`);
console.log(
  `visitors: ${accepted}/${sent} accepted (${(100 * accepted / sent).toFixed(2)} %), ` +
    `p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${
      percentile(latencies, 99).toFixed(1)
    } ms ` +
    `(target 100 %, p99 < 100 ms); delivered ${delivered} of ${accepted * DESTINATIONS}`,
);
console.log(`peak RSS ${peak.toFixed(0)} MB`);
console.log(`junk flood: ${JSON.stringify(statuses.junk ?? {})}`);
console.log(`128 KB bodies: ${JSON.stringify(statuses.large ?? {})}`);
console.log(
  `slow loris: the server closed ${idle.closed} idle and ${slow.closed} slow-body connections`,
);
