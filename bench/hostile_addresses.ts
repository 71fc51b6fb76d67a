/**
 * bench:hostile:addresses — a visitor beside slow bodies held from several addresses.
 *
 * For each attack of DOOR_ATTACKS (tests/reliability/helpers/attackers.ts), a fresh
 * main.ts runs as `deno task start` does, with the defaults (rate limit on) except
 * `HTTP_MAX_CONNECTIONS` (200), and one form of one webhook destination. The attackers
 * (127.0.0.2 and up) hold bodies that never complete, reopening each connection the
 * server closes; a visitor posts a small JSON body every 250 ms on a new connection
 * from 127.0.1.x for BENCH_SECONDS (20). Prints, per attack, the visitor's 202 rate,
 * p50/p99 and its other answers. `BENCH_ATTACKS=0,2` runs only those (by index).
 */
import { DOOR_ATTACKS, visitDuringAttack } from "../tests/reliability/helpers/attackers.ts";
import { percentile } from "../tests/reliability/helpers/cluster.ts";
import { startBenchService } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "20");
const MAX_CONNECTIONS = Deno.env.get("HTTP_MAX_CONNECTIONS") ?? "200";
const chosen = Deno.env.get("BENCH_ATTACKS")?.split(",").map(Number) ??
  DOOR_ATTACKS.map((_, i) => i);

const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.body?.cancel();
  return new Response("ok");
});
console.log(
  `bench:hostile:addresses — ${SECONDS} s per attack, HTTP_MAX_CONNECTIONS=${MAX_CONNECTIONS}, ` +
    `a visit every 250 ms; ${new Date().toISOString().slice(0, 10)}, ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`,
);
/** A fresh service; tried again when its port was taken meanwhile (thousands of sockets churn). */
async function start(attempts = 3): ReturnType<typeof startBenchService> {
  try {
    return await startBenchService(`http://127.0.0.1:${sink.addr.port}/hook`, {
      RATE_LIMIT_MAX: "60",
      HTTP_MAX_CONNECTIONS: MAX_CONNECTIONS,
      LOG_LEVEL: "warn",
    }, { destinations: 1 });
  } catch (error) {
    if (attempts <= 1) throw error;
    return await start(attempts - 1);
  }
}

for (const index of chosen) {
  const attack = DOOR_ATTACKS[index];
  const service = await start();
  try {
    const report = await visitDuringAttack(`${service.origin}/v1/f/${service.publicKey}`, attack, {
      seconds: SECONDS,
      everyMs: 250,
    });
    console.log(
      `${attack.label}: visitor ${report.accepted}/${report.sent} accepted ` +
        `(${(100 * report.accepted / report.sent).toFixed(1)} %), ` +
        `p50 ${percentile(report.latencies, 50).toFixed(0)} ms, ` +
        `p99 ${percentile(report.latencies, 99).toFixed(0)} ms, answers ${
          JSON.stringify(report.statuses)
        }; server closed ${report.attackersClosed} attackers' connections`,
    );
  } finally {
    await service.stop();
  }
}
await sink.shutdown();
