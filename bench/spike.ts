/**
 * bench:spike — a spike of form posts to one form with one SMTP destination, with the
 * default backlog bound: how many are refused, how fast the accepted ones are answered,
 * and how fast their emails go out.
 *
 * The workload of the side-by-side runs against mailform: 50 connections posting
 * urlencoded forms as fast as they are answered for BENCH_SECONDS (10 s), the
 * destination an SMTP relay on a local smtp-server (plaintext, AUTH, messages counted
 * and discarded). formrelay runs as `deno task start` does with its defaults (the
 * backlog bound too) but the rate limit off (all posts come from loopback). The client
 * is 50 fetch loops in this process (so each answer's status and time are known), on
 * the same two cores as the service and the SMTP server.
 *
 * Prints the answers by status, the share of 503s, accepted answers' p50/p99, emails
 * received during the load, and emails per second from the first post until the last
 * accepted submission's email arrived (waiting up to BENCH_DRAIN_SECONDS, 120), and the
 * service's CPU time (user + system, all its threads, /proc) over that span per email,
 * and by kind of thread (the JS thread, KV's SQLite thread, V8's helpers).
 * Then the same spike against the bare durable email (bench/bare_email.ts: the same KV
 * writes and SMTP exchange, nothing else), the floor formrelay's CPU per email is read
 * against, and against the contract's floor (bare_email.ts --contract: that, with the
 * envelope sealed, the message built, the log lines and metrics, by formrelay's own code).
 * BACKLOG_MAX_JOBS, when set, is passed on: a machine too slow to fill the default
 * bound in a spike can be given one in proportion. Then the same spike once more under a
 * CPU profile (unless BENCH_STEPS=0) gives the JS thread's µs per email in each step of
 * a delivered submission (bench/profile_steps.ts DELIVERY_STEPS), read from the first post
 * to the last email as the CPU time is: the process's start and stop are left out.
 */
import { startSmtpServer } from "../tests/helpers/smtp_server.ts";
import { START_TASK } from "../tools/start_task.ts";
import {
  cpuBetween,
  type CpuByThread,
  cpuSeconds,
  cpuSecondsByThread,
  freePort,
  peakRssMb,
  spawnDeno,
  startBenchService,
  waitUntilUp,
} from "./lib.ts";
import {
  type CpuProfile,
  DELIVERY_STEPS,
  formatBreakdown,
  stepBreakdown,
  takeProfile,
} from "./profile_steps.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "10");
const DRAIN_SECONDS = Number(Deno.env.get("BENCH_DRAIN_SECONDS") ?? "120");
const CONNECTIONS = 50;
/** BENCH_STEPS=0 leaves out the profiled run (bench:compare does). */
const STEPS_RUN = Deno.env.get("BENCH_STEPS") !== "0";

const smtp = await startSmtpServer({
  mode: "off",
  username: "bench-user",
  password: "bench-password",
  discard: true,
});
const backlog = Deno.env.get("BACKLOG_MAX_JOBS");

/** What a spike runs against: a URL to post to and the process whose CPU is counted. */
interface Target {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** formrelay with its defaults, writing a CPU profile into `profileDir`, if given. */
async function formrelay(profileDir?: string): Promise<Target> {
  const service = await startBenchService("http://127.0.0.1:9/unused", {
    ...(backlog ? { BACKLOG_MAX_JOBS: backlog } : {}),
  }, {
    profileDir,
    destinationConfigs: [{
      type: "smtp",
      config: {
        host: "127.0.0.1",
        port: smtp.port,
        secureTransport: "off",
        username: "bench-user",
        password: "bench-password",
        from: "forms@tenant.example",
        to: ["owner@tenant.example"],
      },
    }],
  });
  return {
    url: `${service.origin}/v1/f/${service.publicKey}`,
    pid: service.child.pid,
    stop: () => service.stop(),
  };
}

/**
 * The bare durable email (bench/bare_email.ts), with the start task's V8 flags and allocator
 * settings; with `contract`, the contract's floor (its --contract).
 */
async function bareEmail(contract = false): Promise<Target> {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-bare-" });
  const port = freePort();
  const child = spawnDeno([
    START_TASK.v8Flags,
    "--unstable-kv",
    new URL("./bare_email.ts", import.meta.url).pathname,
    String(port),
    `${dir}/bare.kv`,
    String(smtp.port),
    "bench-user",
    "bench-password",
    ...(contract ? ["--contract"] : []),
  ], { ...START_TASK.env });
  await waitUntilUp(`http://127.0.0.1:${port}/`);
  return {
    url: `http://127.0.0.1:${port}/f`,
    pid: child.pid,
    async stop() {
      child.kill("SIGTERM");
      await child.status;
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** One spike against a target (a fresh one is cold: its hot paths not compiled yet). */
async function spike(target: Target) {
  const receivedBefore = smtp.received;
  const connectionsBefore = smtp.connections;
  const { url } = target;
  const cpuBefore = await cpuSeconds(target.pid);
  const threadsBefore = await cpuSecondsByThread(target.pid);
  const statuses = new Map<number, number>();
  const acceptedMs: number[] = [];
  const start = performance.now();
  const end = start + SECONDS * 1000;
  let sent = 0;
  async function connection() {
    while (performance.now() < end) {
      const n = ++sent;
      const began = performance.now();
      const response = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `name=Visitor+${n}&email=visitor${n}%40example.org&message=Hello+there`,
      });
      await response.body?.cancel();
      const ms = performance.now() - began;
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      if (response.status === 202) acceptedMs.push(ms);
    }
  }
  await Promise.all(Array.from({ length: CONNECTIONS }, connection));
  const loadSeconds = (performance.now() - start) / 1000;
  const emailsDuringLoad = smtp.received - receivedBefore;
  const accepted = acceptedMs.length;
  let drained = true;
  await smtp.waitForMessages(receivedBefore + accepted, DRAIN_SECONDS * 1000)
    .catch(() => drained = false);
  const endedAt = performance.now();
  const allSeconds = (endedAt - start) / 1000;
  // From the first post to the last email: every accepted submission's whole cost.
  const cpu = await cpuSeconds(target.pid) - cpuBefore;
  const threadsAfter = await cpuSecondsByThread(target.pid);
  const threads = cpuBetween(threadsBefore, threadsAfter);
  const rss = await peakRssMb(target.pid);
  const emails = smtp.received - receivedBefore;
  return {
    endedAt,
    statuses,
    acceptedMs,
    loadSeconds,
    emailsDuringLoad,
    drained,
    allSeconds,
    cpu,
    threads,
    rss,
    emails,
    sessions: smtp.connections - connectionsBefore,
    // The server's count since it started: exact for the first spike, formrelay's.
    maxOpenSoFar: smtp.maxOpen,
  };
}

/**
 * `count` spikes against a fresh target, one after the other, each once the one before
 * has drained; the target is stopped after them. The first pays for V8 compiling the hot
 * paths as they warm up (on its helper threads and in slower code meanwhile), a second is
 * the process as it runs after its first minute.
 */
async function spikes(target: Target, count: number) {
  try {
    const runs = [];
    for (let i = 0; i < count; i++) runs.push(await spike(target));
    return runs;
  } finally {
    await target.stop();
  }
}

const [run, warm] = await spikes(await formrelay(), 2);
// The floor: the same spikes against a process doing only the durable work of an email.
const [bare, bareWarm] = await spikes(await bareEmail(), 2);
// And with what the contract asks of every email besides, by formrelay's own code.
const [floor, floorWarm] = await spikes(await bareEmail(true), 2);
// Then once more under a CPU profile, for the JS thread's time in each step.
const profileDir = STEPS_RUN
  ? await Deno.makeTempDir({ prefix: "formrelay-bench-profile-" })
  : null;
let profiled: Awaited<ReturnType<typeof spike>> | null = null;
let profile: CpuProfile | null = null;
if (profileDir !== null) {
  const target = await formrelay(profileDir);
  try {
    profiled = await spike(target);
  } finally {
    await target.stop();
  }
  // Read from the first post to the last email: the start and the stop are not the spike's.
  const beforeEndMs = performance.now() - profiled.endedAt;
  profile = await takeProfile(profileDir, { ms: profiled.allSeconds * 1000, beforeEndMs });
}
await smtp.close();
const accepted = run.acceptedMs.length;
const cpuPerEmail = (spiked: { cpu: number; emails: number }) =>
  1000 * spiked.cpu / Math.max(1, spiked.emails);

const answers = [...run.statuses.values()].reduce((a, b) => a + b, 0);
const refused = run.statuses.get(503) ?? 0;
const sorted = run.acceptedMs.toSorted((a, b) => a - b);
const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
console.log(
  `bench:spike — ${CONNECTIONS} connections, urlencoded posts for ${SECONDS} s, one SMTP ` +
    `destination, backlog bound ${backlog ?? "default"} (${
      new Date().toISOString().slice(0, 10)
    }, ` +
    `${navigator.hardwareConcurrency} cores)`,
);
console.log(
  `answers ${answers} (${(answers / run.loadSeconds).toFixed(0)}/s): ${
    [...run.statuses].sort().map(([status, count]) => `${status} × ${count}`).join(", ")
  }; 503s ${(100 * refused / answers).toFixed(2)} % (target ≤ 1 %)`,
);
console.log(
  `accepted ${accepted} (${(accepted / run.loadSeconds).toFixed(0)}/s), answered in p50 ${
    at(0.5).toFixed(1)
  } ms, p99 ${at(0.99).toFixed(1)} ms, max ${at(1).toFixed(0)} ms (target p99 < 100 ms)`,
);
console.log(
  `emails: ${run.emailsDuringLoad} during the load (${
    (run.emailsDuringLoad / run.loadSeconds).toFixed(0)
  }/s); ${run.emails} of ${accepted} after ${run.allSeconds.toFixed(1)} s: ${
    (run.emails / run.allSeconds).toFixed(0)
  } emails/s end to end${
    run.drained ? "" : " (not all arrived in time)"
  }; peak RSS ${run.rss} MB; ` +
    `SMTP sessions ${run.sessions}, at most ${run.maxOpenSoFar} at once`,
);
console.log(
  `service CPU ${run.cpu.toFixed(2)} s (user + system, all threads): ${
    cpuPerEmail(run).toFixed(3)
  } ms per delivered submission, accept to email (target ≤ 0.35 ms, goal 0.25 ms)`,
);
console.log(
  `the bare durable email (bench/bare_email.ts: the same KV writes and SMTP exchange, nothing ` +
    `else): ${bare.acceptedMs.length} accepted (${
      (bare.acceptedMs.length / bare.loadSeconds).toFixed(0)
    }/s), ${bare.emails} emails, ${(bare.emails / bare.allSeconds).toFixed(0)}/s, CPU ${
      cpuPerEmail(bare).toFixed(3)
    } ms each; formrelay's CPU per email ${(cpuPerEmail(run) / cpuPerEmail(bare)).toFixed(2)} × it`,
);
console.log(
  `the contract's floor (bare_email.ts --contract: that, the envelope sealed, the message built ` +
    `by formrelay's MIME builder, the log lines and metrics): CPU ${
      cpuPerEmail(floor).toFixed(3)
    } ms an email (warm ${cpuPerEmail(floorWarm).toFixed(3)}), ${
      (floor.emails / floor.allSeconds).toFixed(0)
    } emails/s; formrelay's CPU per email ${
      (cpuPerEmail(run) / cpuPerEmail(floor)).toFixed(2)
    } × it`,
);
console.log(
  `warm (a second spike against the same process): formrelay ${warm.acceptedMs.length} accepted (${
    (warm.acceptedMs.length / warm.loadSeconds).toFixed(0)
  }/s), ${warm.emails} emails, ${(warm.emails / warm.allSeconds).toFixed(0)}/s, CPU ${
    cpuPerEmail(warm).toFixed(3)
  } ms each${warm.drained ? "" : " (not all arrived in time)"}; the bare durable email CPU ${
    cpuPerEmail(bareWarm).toFixed(3)
  } ms each; formrelay's warm CPU per email ${
    (cpuPerEmail(warm) / cpuPerEmail(bareWarm)).toFixed(2)
  } × it`,
);
/** µs an email on each kind of thread: which thread the difference from the floor is on. */
function byThread({ threads, emails }: { threads: CpuByThread; emails: number }) {
  const per = (seconds: number) => (1e6 * seconds / Math.max(1, emails)).toFixed(0);
  return `JS ${per(threads.js)}, KV's SQLite ${per(threads.kv)}, V8's helpers ${
    per(threads.v8)
  }, other ${per(threads.other)}`;
}
console.log(
  `by thread, µs an email: formrelay ${byThread(run)} (warm ${byThread(warm)}); ` +
    `the bare durable email ${byThread(bare)} (warm ${byThread(bareWarm)}); ` +
    `the contract's floor ${byThread(floor)} (warm ${byThread(floorWarm)})`,
);
if (profiled !== null && profile !== null) {
  console.log(
    `profiled run: ${profiled.emails} emails, service CPU ${
      cpuPerEmail(profiled).toFixed(3)
    } ms each (a profile costs a few per cent). The JS thread's time by step, as V8 samples it ` +
      "(by the wall clock: a socket write or a commit that gives the core away counts whole):",
  );
  const steps = stepBreakdown(profile, Math.max(1, profiled.emails), DELIVERY_STEPS);
  for (const line of formatBreakdown(steps, "email")) console.log(line);
}
