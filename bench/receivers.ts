/**
 * bench:receivers — delivery to receivers that take their time, with the defaults.
 *
 * main.ts runs as `deno task start` does (defaults; only the per-IP limit is off, all
 * load coming from loopback). Receivers on one local server, by path:
 * - `instant`: answers at once; `ms100`: after 100 ms; `s1`: after 1 s;
 * - `rate5`: allows 5 requests in each second, answers `429` with `Retry-After: 1`
 *   beyond that;
 * - `load`: answers after 20 ms × the requests it has in flight, and past 2 s answers
 *   `504` after 2 s (it timed out).
 * Organizations A and B each have a form of two destinations, and A one of a single
 * destination; A a form of `s1` and one of `rate5`, B one of `load`; organization C a form of
 * one `instant` destination, to which a submission is posted every 200 ms throughout
 * (its time from 202 to arrival is the p99 printed per phase).
 *
 * 1. A's and B's two-destination forms on instant receivers: BURST submissions each,
 *    posted 50 at a time, then the delivery rate once acceptance is over, and end to end
 *    (first post to last arrival: deliveries run during a burst that nears the backlog
 *    bound, so the rate after acceptance alone no longer tells how long a burst takes);
 * 2. the same on 100 ms receivers (target: at least 0.6 × the rate of 1);
 * 3. A's single destination at 100 ms: SINGLE submissions (target: 300 deliveries/s);
 * 4. at once: S1 submissions to `s1`, RATE5 to `rate5` (target: all delivered, at most
 *    1.2 attempts each), LOAD to `load` (target: all delivered, no time-out).
 *
 * Prints per destination deliveries/s, the most requests in flight at it, attempts per
 * delivery; C's p99; the process's RSS and the most descriptors it had open. Bounded: about a minute and a half.
 */
import { createOrg } from "../store/orgs.ts";
import { adminClient, createFormWith, submit } from "../tests/reliability/helpers/cluster.ts";
import { freePort, MAIN, peakRssMb, rssMb, spawnDeno, waitUntilUp } from "./lib.ts";
import { START_TASK } from "../tools/start_task.ts";

const BURST = Number(Deno.env.get("BENCH_BURST") ?? "3000");
const SINGLE = Number(Deno.env.get("BENCH_SINGLE") ?? "3000");
const S1 = 400;
const RATE5 = 100;
const LOAD = 400;
const PHASE_TIMEOUT_MS = 60_000;

/** What one receiver path saw. */
interface Receiver {
  hits: number;
  delivered: Set<string>;
  /** Arrival times of first deliveries. */
  arrivals: number[];
  inFlight: number;
  maxInFlight: number;
  refused: number;
  timedOut: number;
}
const receivers = new Map<string, Receiver>();
function receiver(path: string): Receiver {
  let r = receivers.get(path);
  if (!r) {
    r = {
      hits: 0,
      delivered: new Set(),
      arrivals: [],
      inFlight: 0,
      maxInFlight: 0,
      refused: 0,
      timedOut: 0,
    };
    receivers.set(path, r);
  }
  return r;
}
/** Latency mode of the two-destination forms' receivers (phase 1: 0 ms, phase 2: 100 ms). */
let pairDelayMs = 0;
let rateWindow = { second: 0, count: 0 };
const probeArrivals = new Map<string, number>();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  const path = new URL(request.url).pathname.slice(1);
  const body = await request.text();
  const id = request.headers.get("webhook-id")!;
  const r = receiver(path);
  r.hits++;
  r.inFlight++;
  r.maxInFlight = Math.max(r.maxInFlight, r.inFlight);
  try {
    if (path === "c") {
      probeArrivals.set(JSON.parse(body).submissionId, performance.now());
    } else if (path === "rate5") {
      const second = Math.floor(Date.now() / 1000);
      if (rateWindow.second !== second) rateWindow = { second, count: 0 };
      if (++rateWindow.count > 5) {
        r.refused++;
        return new Response("slow down", { status: 429, headers: { "retry-after": "1" } });
      }
    } else if (path === "load") {
      const delay = 20 * r.inFlight;
      if (delay > 2000) {
        await sleep(2000);
        r.timedOut++;
        return new Response("timed out", { status: 504 });
      }
      await sleep(delay);
    } else if (path === "s1") await sleep(1000);
    else if (path === "single") await sleep(100);
    else await sleep(pairDelayMs);
    if (!r.delivered.has(id)) {
      r.delivered.add(id);
      r.arrivals.push(performance.now());
    }
    return new Response("ok");
  } finally {
    r.inFlight--;
  }
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}`;

// Three organizations on a fresh KV file, made through the store before main.ts opens it.
const { loadConfig } = await import("../config.ts");
const { startService } = await import("../service.ts");
const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-" });
const env = {
  KV_PATH: `${dir}/formrelay.kv`,
  ALLOW_PRIVATE_DESTINATIONS: "true",
  RATE_LIMIT_MAX: "0",
  LOG_LEVEL: "warn",
};
const setup = await startService(loadConfig({ ...env, LOG_LEVEL: "silent" }), { deliver: false });
const orgs = [];
for (const name of ["A", "B", "C"]) orgs.push(await createOrg(setup.db, name));
await setup.close();
const port = freePort();
const child = spawnDeno([START_TASK.v8Flags, MAIN], {
  ...START_TASK.env,
  ...env,
  PORT: String(port),
}, { permissions: "start" });
const origin = `http://127.0.0.1:${port}`;
await waitUntilUp(`${origin}/healthz`);
const [adminA, adminB, adminC] = orgs.map((org) => adminClient(() => origin, org.tenantKey));
const hook = (path: string) => ({ type: "webhook", config: { url: `${sinkUrl}/${path}` } });
const pairA = await createFormWith(adminA, "A pair", [hook("a1"), hook("a2")]);
const pairB = await createFormWith(adminB, "B pair", [hook("b1"), hook("b2")]);
const single = await createFormWith(adminA, "A single", [hook("single")]);
const slowA = await createFormWith(adminA, "A slow", [hook("s1")]);
const limitedA = await createFormWith(adminA, "A limited", [hook("rate5")]);
const slowB = await createFormWith(adminB, "B load", [hook("load")]);
const probe = await createFormWith(adminC, "C", [hook("c")]);

// The process's open descriptors (sockets in flight and kept alive, the KV, the listener), sampled.
let maxDescriptors = 0;
const descriptorWatch = setInterval(() => {
  try {
    maxDescriptors = Math.max(
      maxDescriptors,
      [...Deno.readDirSync(`/proc/${child.pid}/fd`)].length,
    );
  } catch {
    // Not Linux: no figure.
  }
}, 100);

// C's probe: a submission every 200 ms, each one's 202 → arrival kept per phase.
let phase = "setup";
const probeSent: { id: string; at: number; phase: string }[] = [];
let probing = true;
const prober = (async () => {
  while (probing) {
    const at = performance.now();
    const answer = await submit(origin, probe.publicKey, { probe: true });
    if (answer.status === 202) {
      probeSent.push({ id: answer.submissionId!, at: performance.now(), phase });
    }
    await sleep(Math.max(0, 200 - (performance.now() - at)));
  }
})();

/** Posts `count` submissions to a form, `parallel` at a time. */
async function post(publicKey: string, count: number, parallel = 50) {
  let next = 0;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < count) {
      next++;
      const answer = await submit(origin, publicKey, { name: "Ada", message: "Hello" });
      if (answer.status !== 202) throw new Error(`submission answered ${answer.status}`);
    }
  }));
}

/** Waits until each path has `count` deliveries (or the phase times out). */
async function settle(paths: string[], count: number) {
  const deadline = Date.now() + PHASE_TIMEOUT_MS;
  while (paths.some((p) => receiver(p).delivered.size < count) && Date.now() < deadline) {
    await sleep(50);
  }
}

/** Deliveries a second at `paths` together, over the middle 80 % of arrivals after `from`. */
function rate(paths: string[], from: number): number {
  const times = paths.flatMap((p) => receiver(p).arrivals).filter((t) => t >= from).sort((a, b) =>
    a - b
  );
  const steady = times.slice(Math.floor(times.length * 0.1), Math.floor(times.length * 0.9));
  return (steady.length - 1) / ((steady.at(-1)! - steady[0]) / 1000);
}

function line(path: string, seconds?: number) {
  const r = receiver(path);
  const perSecond = seconds === undefined ? rate([path], 0) : r.delivered.size / seconds;
  return `  ${path.padEnd(7)} delivered ${String(r.delivered.size).padStart(5)}, ` +
    `${perSecond.toFixed(1).padStart(7)}/s, most in flight ${String(r.maxInFlight).padStart(4)}, ` +
    `attempts per delivery ${(r.hits / Math.max(1, r.delivered.size)).toFixed(2)}` +
    (r.refused ? `, refused ${r.refused}` : "") +
    (path === "load" ? `, timed out ${r.timedOut}` : "");
}

function resetPair() {
  for (const p of ["a1", "a2", "b1", "b2"]) receivers.delete(p);
}

/** A burst phase's figures: the rate once acceptance is over, and from first post to last arrival. */
interface BurstFigures {
  /** Deliveries a second after acceptance ended (middle 80 %). */
  rate: number;
  /** Seconds to accept every submission, and to deliver every one, from the first post. */
  acceptedS: number;
  deliveredS: number;
}

async function burstPhase(name: string, delayMs: number): Promise<BurstFigures> {
  phase = name;
  resetPair();
  pairDelayMs = delayMs;
  const begun = performance.now();
  await Promise.all([post(pairA.publicKey, BURST, 25), post(pairB.publicKey, BURST, 25)]);
  const accepted = performance.now();
  await settle(["a1", "a2", "b1", "b2"], BURST);
  const last = Math.max(...["a1", "a2", "b1", "b2"].flatMap((p) => receiver(p).arrivals));
  return {
    rate: rate(["a1", "a2", "b1", "b2"], accepted),
    acceptedS: (accepted - begun) / 1000,
    deliveredS: (last - begun) / 1000,
  };
}

/** The end-to-end line of a burst phase: what a sender of the burst waits for. */
function wholeBurst(figures: BurstFigures): string {
  const perSecond = (4 * BURST) / figures.deliveredS;
  return `   end to end: accepted in ${figures.acceptedS.toFixed(1)} s, all ${
    4 * BURST
  } delivered ` +
    `${figures.deliveredS.toFixed(1)} s after the first post (${
      perSecond.toFixed(0)
    } deliveries/s)`;
}

const started = performance.now();
const instant = await burstPhase("1 instant", 0);
const instantRate = instant.rate;
console.log(
  `1. four instant destinations, two organizations: ${instantRate.toFixed(0)} deliveries/s`,
);
console.log(wholeBurst(instant));
for (const p of ["a1", "a2", "b1", "b2"]) console.log(line(p));
const slow = await burstPhase("2 at 100 ms", 100);
const slowRate = slow.rate;
console.log(
  `2. the same at 100 ms: ${slowRate.toFixed(0)} deliveries/s = ${
    (slowRate / instantRate).toFixed(2)
  } × instant ` +
    `(target ≥ 0.6)`,
);
console.log(wholeBurst(slow));
for (const p of ["a1", "a2", "b1", "b2"]) console.log(line(p));

phase = "3 single";
await post(single.publicKey, SINGLE);
await settle(["single"], SINGLE);
console.log(`3. one destination at 100 ms (target ≥ 300/s):`);
console.log(line("single"));

phase = "4 mixed";
const mixedStart = performance.now();
await Promise.all([
  post(slowA.publicKey, S1, 10),
  post(limitedA.publicKey, RATE5, 5),
  post(slowB.publicKey, LOAD, 10),
]);
await settle(["s1", "load"], S1);
await settle(["rate5"], RATE5);
const mixedSeconds = (performance.now() - mixedStart) / 1000;
console.log(`4. at once, ${mixedSeconds.toFixed(1)} s:`);
for (const p of ["s1", "rate5", "load"]) console.log(line(p));

probing = false;
await prober;
await sleep(1000);
const byPhase = new Map<string, number[]>();
let lost = 0;
for (const sent of probeSent) {
  const arrived = probeArrivals.get(sent.id);
  if (arrived === undefined) {
    lost++;
    continue;
  }
  const list = byPhase.get(sent.phase) ?? [];
  list.push(arrived - sent.at);
  byPhase.set(sent.phase, list);
}
console.log(`C's instant destination, 202 → arrival (target p99 < 1 s), ${lost} not arrived:`);
for (const [name, list] of byPhase) {
  list.sort((a, b) => a - b);
  const p99 = list[Math.min(list.length - 1, Math.floor(list.length * 0.99))];
  console.log(`  phase ${name}: ${list.length} probes, p99 ${p99.toFixed(0)} ms`);
}
clearInterval(descriptorWatch);
console.log(
  `RSS now ${await rssMb(child.pid)} MB, peak ${await peakRssMb(child.pid)} MB; ` +
    `most descriptors open ${maxDescriptors}; ` +
    `${
      ((performance.now() - started) / 1000).toFixed(0)
    } s; ${navigator.hardwareConcurrency} cores, ` +
    `Deno ${Deno.version.deno}, ${new Date().toISOString().slice(0, 10)}`,
);
child.kill("SIGTERM");
await child.status;
await sink.shutdown();
await Deno.remove(dir, { recursive: true });
