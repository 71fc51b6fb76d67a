/**
 * bench:side-by-side REF — this tree and an earlier commit under the same load at the
 * same time, so that the machine's drift falls on both alike: for a change too small for
 * bench:compare's alternating runs to show (this machine's speed moves by a third within
 * the hour, which swamps a change of a few per cent).
 *
 * REF is checked out in a temporary git worktree, with this tree's bench/ copied over
 * its own. In each tree a child process (this file with --serve) starts formrelay as the
 * other benchmarks do (bench/lib.ts startBenchService: the start task's flags, a KV file
 * of its own) and prints its URL and pid. BENCH_WORKLOAD picks the load, run on both at
 * once, half the connections each:
 *
 * - `email` (default): bench:spike's. Urlencoded posts as fast as they are answered, 25
 *   connections a service for BENCH_SECONDS (10), to a form with one SMTP destination: a
 *   local smtp-server of its own in this process. The service's CPU (all threads, /proc)
 *   from the first post until the last accepted submission's email, per email.
 * - `ingest`: bench:ingest's with repeat visitors. wrk, 25 connections a service, 200-byte
 *   JSON bodies, each X-Forwarded-For address posting twice, the rate limit on, the
 *   backlog bound raised, two webhook destinations whose receiver holds every delivery
 *   unanswered, so that the jobs wait as they wait behind bench:ingest's burst. The CPU
 *   over the load, per request.
 *
 * BENCH_ROUNDS rounds (5), each with fresh processes, the side started first swapped
 * each round. Prints each round's figures, and the median of the rounds' ratios (this
 * tree ÷ REF).
 *
 *     deno task bench:side-by-side a4d674a
 */
import { startSmtpServer, type TestSmtpServer } from "../tests/helpers/smtp_server.ts";
import { cpuSeconds, runWrk, startBenchService } from "./lib.ts";
import { checkOutBeside, median } from "./ref_worktree.ts";

const WORKLOAD = Deno.env.get("BENCH_WORKLOAD") ?? "email";
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "10");
const ROUNDS = Number(Deno.env.get("BENCH_ROUNDS") ?? "5");
const CONNECTIONS = 25;
const SMTP_LOGIN = { username: "bench-user", password: "bench-password" };
/** bench:ingest's body: 200 bytes of JSON. */
const INGEST_BODY = (() => {
  const fields = { name: "Ada Lovelace", email: "ada@example.com", message: "" };
  return JSON.stringify({ ...fields, message: "x".repeat(200 - JSON.stringify(fields).length) });
})();

/** A service started by a --serve child: where to post, and the process to measure. */
interface Served {
  url: string;
  pid: number;
}

if (Deno.args[0] === "--serve") {
  // The child: formrelay from this tree, until the parent closes stdin.
  const [, workload, smtpPort] = Deno.args;
  // The webhooks' receiver answers nothing until the end: the jobs wait, as they wait behind
  // bench:ingest's burst, and the load measures ingestion alone.
  const end = Promise.withResolvers<void>();
  const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async () => {
    await end.promise;
    return new Response("ok");
  });
  const service = workload === "email"
    ? await startBenchService("http://127.0.0.1:9/unused", {}, {
      destinationConfigs: [{
        type: "smtp",
        config: {
          host: "127.0.0.1",
          port: Number(smtpPort),
          secureTransport: "off",
          ...SMTP_LOGIN,
          from: "forms@tenant.example",
          to: ["owner@tenant.example"],
        },
      }],
    })
    : await startBenchService(`http://127.0.0.1:${sink.addr.port}/hook`, {
      CLIENT_IP_HEADER: "x-forwarded-for",
      BACKLOG_MAX_JOBS: "1000000",
      BACKLOG_ORG_SHARE: "1",
      RATE_LIMIT_MAX: "60",
    });
  const served: Served = {
    url: `${service.origin}/v1/f/${service.publicKey}`,
    pid: service.child.pid,
  };
  console.log(JSON.stringify(served));
  for await (const _ of Deno.stdin.readable) { /* nothing is sent: this waits for the end */ }
  end.resolve();
  await service.stop();
  await sink.shutdown();
  Deno.exit(0);
}

const REF = Deno.args[0];
if (!REF) {
  console.error("usage: deno task bench:side-by-side REF  (a commit, branch or tag)");
  Deno.exit(2);
}

/** Starts the --serve child in `dir`; its service, and how to stop it. */
async function serve(dir: string, smtp: TestSmtpServer | null) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--lock=deno.test.lock",
      "bench/side_by_side.ts",
      "--serve",
      WORKLOAD,
      String(smtp?.port ?? 0),
    ],
    cwd: dir,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await lines.read();
    if (done) throw new Error(`formrelay did not start in ${dir}`);
    text += value;
  }
  return {
    served: JSON.parse(text.slice(0, text.indexOf("\n"))) as Served,
    async stop() {
      await child.stdin.close();
      await lines.cancel();
      await child.status;
    },
  };
}

/** bench:spike's load on one service; its accepted posts and CPU per email. */
async function emailLoad(served: Served, smtp: TestSmtpServer) {
  const receivedBefore = smtp.received;
  const cpuBefore = await cpuSeconds(served.pid);
  const end = performance.now() + SECONDS * 1000;
  let sent = 0;
  let accepted = 0;
  async function connection() {
    while (performance.now() < end) {
      const n = ++sent;
      const response = await fetch(served.url, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `name=Visitor+${n}&email=visitor${n}%40example.org&message=Hello+there`,
      });
      await response.body?.cancel();
      if (response.status === 202) accepted++;
    }
  }
  await Promise.all(Array.from({ length: CONNECTIONS }, connection));
  await smtp.waitForMessages(receivedBefore + accepted, 120_000);
  const cpu = await cpuSeconds(served.pid) - cpuBefore;
  return { perSecond: accepted / SECONDS, cpuMicros: cpu * 1e6 / accepted, unit: "email" };
}

/** bench:ingest's load with repeat visitors on one service; its requests and CPU per request. */
async function ingestLoad(served: Served) {
  const cpuBefore = await cpuSeconds(served.pid);
  const result = await runWrk(served.url, {
    connections: CONNECTIONS,
    seconds: SECONDS,
    body: INGEST_BODY,
    distinctClients: true,
    postsPerClient: 2,
  });
  const cpu = await cpuSeconds(served.pid) - cpuBefore;
  if (result.non2xx > 0) throw new Error(`${result.non2xx} answers other than 2xx`);
  return {
    perSecond: result.requestsPerSecond,
    cpuMicros: cpu * 1e6 / result.requests,
    unit: "request",
  };
}

const worktree = await checkOutBeside(REF, { prefix: "formrelay-side-by-side-" });
const { sides } = worktree;
console.log(
  `bench:side-by-side — ${sides[1].name} and ${sides[0].name} at once, workload ${WORKLOAD}, ` +
    `${CONNECTIONS} connections each for ${SECONDS} s, ${ROUNDS} rounds; ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ${
      new Date().toISOString()
    }`,
);
const smtps = WORKLOAD === "email"
  ? await Promise.all(
    sides.map(() => startSmtpServer({ mode: "off", ...SMTP_LOGIN, discard: true })),
  )
  : [null, null];
const rateRatios: number[] = [];
const cpuRatios: number[] = [];
try {
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? [0, 1] : [1, 0];
    const started: Awaited<ReturnType<typeof serve>>[] = [];
    for (const i of order) started[i] = await serve(sides[i].dir, smtps[i]);
    try {
      const results = await Promise.all(
        started.map(({ served }, i) =>
          WORKLOAD === "email" ? emailLoad(served, smtps[i]!) : ingestLoad(served)
        ),
      );
      const [ref, here] = results;
      rateRatios.push(here.perSecond / ref.perSecond);
      cpuRatios.push(here.cpuMicros / ref.cpuMicros);
      console.log(
        `round ${round}: ` +
          results.map((r, i) =>
            `${sides[i].name} ${Math.round(r.perSecond)}/s, CPU ${
              Math.round(r.cpuMicros)
            } µs/${r.unit}`
          ).join("; ") +
          `; ratios ${rateRatios.at(-1)!.toFixed(3)} (rate), ${cpuRatios.at(-1)!.toFixed(3)} (CPU)`,
      );
    } finally {
      await Promise.all(started.map((side) => side.stop()));
    }
  }
  console.log(
    `median of the rounds, this tree ÷ REF: rate ${median(rateRatios).toFixed(3)}, ` +
      `CPU per ${WORKLOAD === "email" ? "email" : "request"} ${median(cpuRatios).toFixed(3)}`,
  );
} finally {
  await Promise.all(smtps.map((smtp) => smtp?.close()));
  await worktree.remove();
}
