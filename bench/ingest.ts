/**
 * bench:ingest — formrelay's ingestion against the bare durable ingest and a bare Deno.serve.
 *
 * formrelay runs as `deno task start` does, with the production defaults (rate limit on)
 * behind a trusted proxy header (CLIENT_IP_HEADER=x-forwarded-for): wrk gives each request its
 * own client address, as a CDN in front would. The backlog bound is raised (BACKLOG_MAX_JOBS,
 * one organization may fill it): with the default the run would fill it in under two seconds
 * and then measure refusals, which bench:sustained is for. Each formrelay run has a fresh
 * file-backed KV with a form of two enabled webhook destinations (a local sink receives the
 * deliveries, which a burst holds back).
 *
 * The reference is the bare durable ingest (../shared/bench/bare_durable_ingest.ts beside the
 * clone, BARE_DURABLE_DIR to point elsewhere): Deno.serve, JSON.parse, the submission and two
 * job keys group-committed to a file-backed KV, 202 after the commit. It, formrelay and
 * formrelay's writes alone (bench/writes_only_server.ts: the same server storing what
 * formrelay stores, sealed, through formrelay's writer; the ceiling of formrelay's ratio)
 * run alternately, BENCH_ROUNDS times each (2), so load from elsewhere on the machine falls
 * on all; then formrelay and its writes alone side by side, BENCH_SIDE_ROUNDS times (3):
 * both at once, half the connections each, so that the ratio of their CPU a request is
 * read without the machine's drift between alternate runs; then the rate limit off once
 * and the bare Deno.serve 202 once. wrk drives 50 connections for BENCH_SECONDS (10 s) a
 * run with a 200-byte JSON body and the same script for all (BENCH_POSTS_PER_CLIENT=2:
 * each address posts twice in a row, every visitor a repeat one). Prints req/s, CPU a
 * request (all threads, and the JS thread's with how busy it was: near 1, that thread
 * bounds the server), p50/p99, peak RSS and ratios. Last, one more
 * formrelay run with the defaults under a CPU profile (which slows it a little) gives the JS
 * thread's time per request in each step of the pipeline (bench/profile_steps.ts), read
 * over the load alone: the process's start and stop (the rate limiter writing its counts,
 * say) are left out.
 */
import {
  cpuSeconds,
  freePort,
  jsThreadCpuSeconds,
  peakRssMb,
  runWrk,
  spawnDeno,
  startBenchService,
  waitUntilUp,
} from "./lib.ts";
import type { WrkResult } from "./lib.ts";
import {
  formatBreakdown,
  type ProfileWindow,
  stepBreakdown,
  takeProfile,
} from "./profile_steps.ts";
import { median } from "./ref_worktree.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "10");
const ROUNDS = Number(Deno.env.get("BENCH_ROUNDS") ?? "2");
const CONNECTIONS = 50;
/** Posts per client address (BENCH_POSTS_PER_CLIENT; 2: every visitor a repeat one). */
const POSTS_PER_CLIENT = Number(Deno.env.get("BENCH_POSTS_PER_CLIENT") ?? "1");
/** Rounds of formrelay and its writes alone side by side (BENCH_SIDE_ROUNDS). */
const SIDE_ROUNDS = Number(Deno.env.get("BENCH_SIDE_ROUNDS") ?? "3");
const BARE_DURABLE = new URL(
  "bare_durable_ingest.ts",
  Deno.env.get("BARE_DURABLE_DIR") ?? new URL("../../shared/bench/", import.meta.url),
).pathname;
const prefix = JSON.stringify({ name: "Ada Lovelace", email: "ada@example.com", message: "" });
const body = JSON.stringify({
  name: "Ada Lovelace",
  email: "ada@example.com",
  message: "x".repeat(200 - prefix.length),
});
if (new TextEncoder().encode(body).length !== 200) throw new Error("body is not 200 bytes");
const load = {
  connections: CONNECTIONS,
  seconds: SECONDS,
  body,
  distinctClients: true,
  postsPerClient: POSTS_PER_CLIENT,
};

// A local receiver for the deliveries that run during the load.
let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  // A service stopped at a run's end cuts off the deliveries it had under way.
  if (await request.arrayBuffer().then(() => true, () => false)) delivered++;
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}/hook`;

interface Run {
  result: WrkResult;
  rss: number;
  /** The server's CPU time (all threads) per request, µs. */
  cpuMicros: number;
  /** Its JS thread's share of that, µs. */
  jsMicros: number;
}

/** wrk against `url` (with `connections`) while measuring the server process `pid`. */
async function measure(url: string, pid: number, connections = CONNECTIONS): Promise<Run> {
  const cpuBefore = await cpuSeconds(pid);
  const jsBefore = await jsThreadCpuSeconds(pid);
  const result = await runWrk(url, { ...load, connections });
  const cpuMicros = (await cpuSeconds(pid) - cpuBefore) * 1e6 / result.requests;
  const jsMicros = (await jsThreadCpuSeconds(pid) - jsBefore) * 1e6 / result.requests;
  return { result, rss: await peakRssMb(pid), cpuMicros, jsMicros };
}

/** A server under test: where to post, its process, and how to stop it. */
interface Server {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** formrelay with `env` over the defaults (under a CPU profile written to `profileDir`). */
async function startFormrelay(env: Record<string, string>, profileDir?: string) {
  const service = await startBenchService(sinkUrl, {
    LOG_LEVEL: Deno.env.get("LOG_LEVEL") ?? "info",
    CLIENT_IP_HEADER: "x-forwarded-for",
    BACKLOG_MAX_JOBS: "1000000",
    BACKLOG_ORG_SHARE: "1",
    ...env,
  }, { profileDir });
  return {
    url: `${service.origin}/v1/f/${service.publicKey}`,
    pid: service.child.pid,
    stop: () => service.stop(),
  };
}

/**
 * One run of formrelay with `env` over the defaults (under a CPU profile written to
 * `profileDir`), and the load's place in the process's life (for reading the profile).
 */
async function runFormrelay(
  env: Record<string, string>,
  profileDir?: string,
): Promise<Run & { window: ProfileWindow }> {
  const service = await startFormrelay(env, profileDir);
  const loadStarted = performance.now();
  const run = await measure(service.url, service.pid);
  const loadEnded = performance.now();
  await service.stop();
  const window = { ms: loadEnded - loadStarted, beforeEndMs: performance.now() - loadEnded };
  return { ...run, window };
}

/** A baseline script taking its port (and `args`), on its own temporary directory. */
async function startBaseline(script: string, args: (dir: string) => string[]): Promise<Server> {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-bare-" });
  const port = freePort();
  const child = spawnDeno(["--unstable-kv", script, String(port), ...args(dir)], {
    PORT: String(port),
  });
  const stop = async () => {
    child.kill("SIGTERM");
    await child.status;
    await Deno.remove(dir, { recursive: true });
  };
  try {
    await waitUntilUp(`http://127.0.0.1:${port}/`);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `http://127.0.0.1:${port}/`, pid: child.pid, stop };
}

/** One run of a baseline script. */
async function runBaseline(script: string, args: (dir: string) => string[]): Promise<Run> {
  const server = await startBaseline(script, args);
  try {
    return await measure(server.url, server.pid);
  } finally {
    await server.stop();
  }
}

const WRITES_ONLY = new URL("./writes_only_server.ts", import.meta.url).pathname;
const runBareDurable = () => runBaseline(BARE_DURABLE, (dir) => [`${dir}/bare.kv`]);
const runWritesOnly = () => runBaseline(WRITES_ONLY, (dir) => [`${dir}/writes.kv`]);

/**
 * formrelay with the defaults and its writes alone under the same load at the same time,
 * half the connections each: a slower spell of the machine slows both, so the ratio of
 * their CPU a request is read without the drift that moves alternate runs.
 */
async function sideBySide(): Promise<{ service: Run; writes: Run }> {
  const [service, writes] = await Promise.all([
    startFormrelay({ RATE_LIMIT_MAX: "60" }),
    startBaseline(WRITES_ONLY, (dir) => [`${dir}/writes.kv`]),
  ]);
  try {
    const half = CONNECTIONS / 2;
    const [serviceRun, writesRun] = await Promise.all([
      measure(service.url, service.pid, half),
      measure(writes.url, writes.pid, half),
    ]);
    return { service: serviceRun, writes: writesRun };
  } finally {
    await Promise.all([service.stop(), writes.stop()]);
  }
}
const runBare = () => runBaseline(new URL("./bare_server.ts", import.meta.url).pathname, () => []);

// The defaults as users run them (the rate limit on: 60 per form and client per 10 min),
// alternating with the bare durable ingest.
const formrelay: Run[] = [];
const durable: Run[] = [];
const writesOnly: Run[] = [];
for (let round = 0; round < ROUNDS; round++) {
  formrelay.push(await runFormrelay({ RATE_LIMIT_MAX: "60" }));
  durable.push(await runBareDurable());
  writesOnly.push(await runWritesOnly());
}
const sideBySideRuns = [];
for (let round = 0; round < SIDE_ROUNDS; round++) sideBySideRuns.push(await sideBySide());
const limitOff = await runFormrelay({ RATE_LIMIT_MAX: "0" });
const bare = await runBare();
const profileDir = await Deno.makeTempDir({ prefix: "formrelay-bench-profile-" });
const profiled = await runFormrelay({ RATE_LIMIT_MAX: "60" }, profileDir);
const profile = await takeProfile(profileDir, profiled.window);
await sink.shutdown();

/** The share of the run its JS thread was busy: near 1, that thread bounds the server. */
const jsBusy = ({ result, jsMicros }: Run) => jsMicros * result.requestsPerSecond / 1e6;
const row = (name: string, run: Run) => {
  const { result: r, rss, cpuMicros, jsMicros } = run;
  return `${name.padEnd(30)} ${r.requestsPerSecond.toFixed(0).padStart(8)} req/s  CPU ${
    cpuMicros.toFixed(0).padStart(3)
  } µs/req (JS thread ${jsMicros.toFixed(0)}, busy ${jsBusy(run).toFixed(2)})  p50 ${
    r.p50Ms.toFixed(2)
  } ms  p99 ${r.p99Ms.toFixed(2)} ms  peak RSS ${rss} MB  non-2xx ${r.non2xx}${
    r.errors ? `  ${r.errors}` : ""
  }`;
};
const total = (runs: Run[]) => runs.reduce((sum, run) => sum + run.result.requestsPerSecond, 0);
const ratio = total(formrelay) / total(durable);
const busyRange = (runs: Run[]) => {
  const busy = runs.map(jsBusy);
  return `${Math.min(...busy).toFixed(2)}–${Math.max(...busy).toFixed(2)}`;
};
const cpuTotal = (runs: Run[]) => runs.reduce((sum, run) => sum + run.cpuMicros, 0);
console.log(
  `bench:ingest — wrk -c${CONNECTIONS} -d${SECONDS}s, 200-byte JSON body, ` +
    `a distinct X-Forwarded-For per ${
      POSTS_PER_CLIENT === 1 ? "request" : `${POSTS_PER_CLIENT} requests`
    }; ${ROUNDS} alternating rounds`,
);
formrelay.forEach((run, i) => {
  console.log(row(`formrelay, defaults (${i + 1})`, run));
  console.log(row(`bare durable ingest (${i + 1})`, durable[i]));
  console.log(row(`formrelay's writes alone (${i + 1})`, writesOnly[i]));
});
console.log(row("formrelay, rate limit off", limitOff));
console.log(row("bare Deno.serve 202", bare));
console.log(
  `ratio to the bare durable ingest ${ratio.toFixed(3)} with the defaults ` +
    `(rounds: ${
      formrelay.map((run, i) =>
        (run.result.requestsPerSecond / durable[i].result.requestsPerSecond).toFixed(3)
      ).join(", ")
    }; target ≥ 0.55, goal 0.7); CPU per request ${
      (cpuTotal(formrelay) / cpuTotal(durable)).toFixed(2)
    } times the bare durable ingest's; ` +
    `to the bare Deno.serve ${
      (total(formrelay) / ROUNDS / bare.result.requestsPerSecond).toFixed(3)
    }; p99 < 50 ms, RSS < 220 MB, no non-2xx; ` +
    `deliveries seen at the sink meanwhile: ${delivered}`,
);
console.log(
  `formrelay's writes alone: ${(total(writesOnly) / total(durable)).toFixed(3)} of the bare ` +
    `durable ingest (rounds: ${
      writesOnly.map((run, i) =>
        (run.result.requestsPerSecond / durable[i].result.requestsPerSecond).toFixed(3)
      ).join(", ")
    }), CPU per request ${(cpuTotal(writesOnly) / cpuTotal(durable)).toFixed(2)} times its; ` +
    `the service ${(total(formrelay) / total(writesOnly)).toFixed(3)} of them (rounds: ${
      formrelay.map((run, i) =>
        (run.result.requestsPerSecond / writesOnly[i].result.requestsPerSecond).toFixed(3)
      ).join(", ")
    }); JS thread busy ${busyRange(formrelay)} of each run in the service, ${
      busyRange(writesOnly)
    } in the writes alone`,
);
if (sideBySideRuns.length > 0) {
  const cpuRatios = sideBySideRuns.map(({ service, writes }) =>
    writes.cpuMicros / service.cpuMicros
  );
  console.log(
    `side by side (both at once, ${CONNECTIONS / 2} connections each), the writes alone's CPU a ` +
      `request ÷ the service's, the service's share of its writes alone by cost: median ${
        median(cpuRatios).toFixed(3)
      } (rounds: ${cpuRatios.map((r) => r.toFixed(3)).join(", ")}; target ≥ 0.65); the service ${
        sideBySideRuns.map(({ service }) => service.cpuMicros.toFixed(0)).join(", ")
      } µs a request, the writes alone ${
        sideBySideRuns.map(({ writes }) => writes.cpuMicros.toFixed(0)).join(", ")
      }`,
  );
}
console.log(row("formrelay, defaults, profiled", profiled));
for (const line of formatBreakdown(stepBreakdown(profile, profiled.result.requests))) {
  console.log(line);
}
