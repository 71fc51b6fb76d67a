/** Shared pieces of the benchmarks: child processes, wrk, RSS. Not tests. */
import { freePort } from "../tools/ports.ts";
import { START_TASK } from "../tools/start_task.ts";

export const MAIN = new URL("../main.ts", import.meta.url).pathname;

/**
 * A child process started from a Deno script, with its pid for RSS readings. With
 * `permissions: "start"` it has the start task's permissions, not `-A`: main.ts then runs
 * as users run it (it cannot read the descriptor limit, so its bounds are the defaults
 * for 4 096 descriptors).
 */
export function spawnDeno(
  args: string[],
  env: Record<string, string>,
  options: { stdout?: "piped" | "null"; permissions?: "all" | "start" } = {},
): Deno.ChildProcess {
  const permissions = options.permissions === "start" ? START_TASK.permissions : ["-A"];
  return new Deno.Command(Deno.execPath(), {
    args: ["run", ...permissions, ...args],
    env,
    stdout: options.stdout ?? "null",
    stderr: "inherit",
  }).spawn();
}

/** Waits until an HTTP endpoint answers (a condition with a deadline, not a fixed sleep). */
export async function waitUntilUp(url: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(url);
      await response.body?.cancel();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  throw new Error(`${url} did not come up`);
}

/** Peak resident set size of a process in MB (VmHWM). */
export async function peakRssMb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? "0");
  return Math.round(kb / 1024);
}

/** Current resident set size of a process in MB (VmRSS). */
export async function rssMb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? "0");
  return Math.round(kb / 1024);
}

/**
 * CPU seconds (user + system, all threads) a process has used so far. Per request it
 * tells what a server costs, which holds better than its throughput while other work
 * shares the machine.
 */
export function cpuSeconds(pid: number): Promise<number> {
  return cpuSecondsIn(`/proc/${pid}/stat`);
}

/**
 * CPU seconds a process's main thread, Deno's JS thread, has used so far: where a server
 * that keeps it busy all the time is bound, whatever its other threads do.
 */
export function jsThreadCpuSeconds(pid: number): Promise<number> {
  return cpuSecondsIn(`/proc/${pid}/task/${pid}/stat`);
}

async function cpuSecondsIn(statPath: string): Promise<number> {
  return cpuSecondsOf(await Deno.readTextFile(statPath));
}

/** utime + stime of a /proc stat line, in seconds. */
function cpuSecondsOf(stat: string): number {
  // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
}

/** The kinds of thread a Deno process's CPU time is told apart by. */
export interface CpuByThread {
  /** The JS thread (the main thread). */
  js: number;
  /** KV's SQLite thread, which runs every commit (named sw-N). */
  kv: number;
  /** V8's helper threads: compiling and, without --single-threaded-gc, garbage collection. */
  v8: number;
  /** The rest: the runtime's I/O threads. */
  other: number;
}

/**
 * CPU seconds a process's threads have used so far, by kind: which thread a difference
 * between two servers is on. A thread that ended takes its time with it.
 */
export async function cpuSecondsByThread(pid: number): Promise<CpuByThread> {
  const byKind: CpuByThread = { js: 0, kv: 0, v8: 0, other: 0 };
  for await (const entry of Deno.readDir(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = await Deno.readTextFile(`/proc/${pid}/task/${entry.name}/stat`);
    } catch {
      continue; // ended since the listing
    }
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const kind: keyof CpuByThread = entry.name === String(pid)
      ? "js"
      : name.startsWith("sw-")
      ? "kv"
      : name.startsWith("V8 ")
      ? "v8"
      : "other";
    byKind[kind] += cpuSecondsOf(stat);
  }
  return byKind;
}

/** The CPU seconds each kind of thread used from `before` to `after`. */
export function cpuBetween(before: CpuByThread, after: CpuByThread): CpuByThread {
  return {
    js: after.js - before.js,
    kv: after.kv - before.kv,
    v8: after.v8 - before.v8,
    other: after.other - before.other,
  };
}

/** USER_HZ on Linux. */
const CLOCK_TICKS_PER_SECOND = 100;

/** A wrk run's figures. */
export interface WrkResult {
  /** Requests completed. */
  requests: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  errors: string | null;
}

function toMs(value: string): number {
  const m = /([\d.]+)(us|ms|s|m)/.exec(value);
  if (!m) return NaN;
  const n = Number(m[1]);
  return m[2] === "us" ? n / 1000 : m[2] === "ms" ? n : m[2] === "s" ? n * 1000 : n * 60_000;
}

/**
 * A wrk script giving every request its own client address in X-Forwarded-For, as a
 * CDN in front would (10.<thread>.<n>): each wrk thread numbers its own requests; with
 * `posts` > 1, each address posts that many times in a row (repeat visitors).
 */
const distinctClientsLua = (posts: number) => `
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
local n = 0
function request()
  local c = math.floor(n / ${posts})
  n = n + 1
  local address = string.format("10.%d.%d.%d", id, math.floor(c / 256) % 256, c % 256)
  return wrk.format(nil, nil, { ["Content-Type"] = "application/json", ["X-Forwarded-For"] = address })
end
`;

/**
 * Runs wrk with a Lua script posting `body` as JSON; with `distinctClients`, each
 * request from its own address, or each `postsPerClient` requests (distinctClientsLua).
 */
export async function runWrk(
  url: string,
  options: {
    connections: number;
    seconds: number;
    body: string;
    threads?: number;
    distinctClients?: boolean;
    postsPerClient?: number;
  },
): Promise<WrkResult> {
  const script = await Deno.makeTempFile({ suffix: ".lua" });
  await Deno.writeTextFile(
    script,
    `wrk.method = "POST"\nwrk.body = ${JSON.stringify(options.body)}\n` +
      `wrk.headers["Content-Type"] = "application/json"\n` +
      (options.distinctClients ? distinctClientsLua(options.postsPerClient ?? 1) : ""),
  );
  const output = await new Deno.Command("wrk", {
    args: [
      `-t${options.threads ?? 2}`,
      `-c${options.connections}`,
      `-d${options.seconds}s`,
      "--latency",
      "-s",
      script,
      url,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  await Deno.remove(script);
  const text = new TextDecoder().decode(output.stdout);
  if (!output.success) throw new Error(`wrk failed: ${new TextDecoder().decode(output.stderr)}`);
  return {
    requests: Number(/(\d+) requests in/.exec(text)?.[1]),
    requestsPerSecond: Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]),
    p50Ms: toMs(/^\s+50%\s+(\S+)/m.exec(text)?.[1] ?? ""),
    p99Ms: toMs(/^\s+99%\s+(\S+)/m.exec(text)?.[1] ?? ""),
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? "0"),
    errors: /Socket errors:.*/.exec(text)?.[0] ?? null,
  };
}

/**
 * With `dir` (by default BENCH_PROFILE_DIR), the service's processes write a CPU profile
 * there when they stop (open it in Chrome's DevTools; `deno run --cpu-prof`).
 */
function profileFlags(dir = Deno.env.get("BENCH_PROFILE_DIR")): string[] {
  return dir ? ["--cpu-prof", `--cpu-prof-dir=${dir}`] : [];
}

/** A free TCP port on loopback (shared with the tests; re-exported for the benchmarks). */
export { freePort };

/**
 * main.ts running as one or more children on a fresh file-backed KV, with one form of
 * webhook destinations.
 */
export interface BenchService {
  /** The first process's origin (the only one unless several were asked for). */
  origin: string;
  /** The first process. */
  child: Deno.ChildProcess;
  /** Every process's origin, in start order. */
  origins: string[];
  children: Deno.ChildProcess[];
  publicKey: string;
  destinationIds: string[];
  /** The first organization's form and tenant key, for admin calls. */
  formId: string;
  tenantKey: string;
  /** A second tenant's form (options.otherTenant), with one webhook destination. */
  other: { publicKey: string; destinationIds: string[] } | null;
  /** The KV file (its -wal and -shm files beside it). */
  kvPath: string;
  /** Stops the children and removes their KV; throws if a child had exited before. */
  stop(): Promise<void>;
}

/**
 * Starts main.ts for a benchmark: the org is created through the store before the
 * child opens the KV; the form and its destinations (`sinkUrl` + "/a", "/b", ...: two
 * unless `destinations` says otherwise) through the admin API. The per-IP rate limit is
 * off unless `env` sets it (all load comes from loopback); `env` adds or overrides
 * variables. With `otherTenant`, a second organization gets a form with a destination
 * at `sinkUrl` + that path. With `processes`, that many children share the KV file, as
 * several processes of one deployment do.
 */
export async function startBenchService(
  sinkUrl: string,
  env: Record<string, string> = {},
  options: {
    otherTenant?: string;
    processes?: number;
    destinations?: number;
    /** The form's destinations as the admin API takes them, instead of the webhooks. */
    destinationConfigs?: Record<string, unknown>[];
    /** Where the processes write a CPU profile when they stop (default BENCH_PROFILE_DIR). */
    profileDir?: string;
  } = {},
): Promise<BenchService> {
  const { loadConfig } = await import("../config.ts");
  const { startService } = await import("../service.ts");
  const { createOrg } = await import("../store/orgs.ts");
  const { adminClient, createFormWith } = await import("../tools/admin_client.ts");
  const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-" });
  const fullEnv = {
    KV_PATH: `${dir}/formrelay.kv`,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    RATE_LIMIT_MAX: "0",
    // The benchmarks measure the engine: every delivery goes to one local sink of one
    // organization, exactly what the outbound budget exists to hold back (OUTBOUND_*).
    OUTBOUND_HOST_REQUESTS: "0",
    OUTBOUND_HOST_BYTES: "0",
    OUTBOUND_ORG_REQUESTS: "0",
    OUTBOUND_ORG_BYTES: "0",
    LOG_LEVEL: "info",
    ...env,
  };
  const setup = await startService({ ...loadConfig({ ...fullEnv, LOG_LEVEL: "silent" }) }, {
    deliver: false,
  });
  const { tenantKey } = await createOrg(setup.db, "Bench");
  const otherKey = options.otherTenant ? (await createOrg(setup.db, "Other")).tenantKey : null;
  await setup.close();

  // A child that exits before stop() (a port taken after all) spoils the run: stop() says so.
  let exitedEarly = false;
  let stopping = false;
  const taken = new Set<number>();
  /**
   * One child on a free port, once it answers. A port found free can be taken before the
   * child listens on it (by a connection's source port, with load on the machine): the
   * child then exits at once, and another port is tried.
   */
  async function startChild(): Promise<{ child: Deno.ChildProcess; origin: string }> {
    for (let attempt = 1;; attempt++) {
      let port = freePort();
      while (taken.has(port)) port = freePort();
      taken.add(port);
      const child = spawnDeno([START_TASK.v8Flags, ...profileFlags(options.profileDir), MAIN], {
        ...START_TASK.env,
        ...fullEnv,
        PORT: String(port),
      }, { permissions: "start" });
      const origin = `http://127.0.0.1:${port}`;
      const started = await Promise.race([
        waitUntilUp(`${origin}/healthz`).then(() => true, () => false),
        child.status.then(() => false),
      ]);
      if (started) {
        child.status.then(() => exitedEarly ||= !stopping);
        return { child, origin };
      }
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      await child.status;
      if (attempt === 3) throw new Error("formrelay did not start (three tries)");
    }
  }
  const started = await Promise.all(
    Array.from({ length: options.processes ?? 1 }, () => startChild()),
  );
  const children = started.map((s) => s.child);
  const origins = started.map((s) => s.origin);
  const origin = origins[0];
  const admin = adminClient(() => origin, tenantKey);
  const paths = Array.from(
    { length: options.destinations ?? 2 },
    (_, i) => `/${String.fromCharCode(97 + i)}`,
  );
  const { formId, publicKey, destinationIds } = await createFormWith(
    admin,
    "Bench",
    options.destinationConfigs ??
      paths.map((path) => ({ type: "webhook", config: { url: sinkUrl + path } })),
  );
  const other = otherKey === null ? null : await createFormWith(
    adminClient(() => origin, otherKey),
    "Other",
    [{ type: "webhook", config: { url: sinkUrl + options.otherTenant } }],
  );
  return {
    origin,
    child: children[0],
    origins,
    children,
    publicKey,
    destinationIds,
    formId,
    tenantKey,
    other,
    kvPath: fullEnv.KV_PATH,
    async stop() {
      stopping = true;
      for (const child of children) {
        try {
          child.kill("SIGTERM");
        } catch { /* already gone */ }
      }
      for (const child of children) await child.status;
      await Deno.remove(dir, { recursive: true });
      if (exitedEarly) throw new Error("A formrelay child exited during the benchmark");
    },
  };
}
