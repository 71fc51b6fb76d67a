/**
 * bench:page-token — what recording a time-trap page token's use costs ingestion. One
 * service process (the start task's settings, rate limit off); wrk posts the 200-byte
 * JSON body of bench:ingest for BENCH_SECONDS, alternately to the form without spam rules
 * and with `minSeconds: 1`, BENCH_ROUNDS times each. With the trap, every request carries
 * a token of its own (made with the service's key, loaded 2 s before), so each is a
 * first use: checked, recorded in the acceptance commit, delivered.
 *
 *     deno task bench:page-token
 */
import { pageToken, TIME_TRAP_FIELD } from "../rules/spam.ts";
import { createSealer } from "../store/sealing.ts";
import { adminClient } from "../tools/admin_client.ts";
import { startBenchService } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "8");
const ROUNDS = Number(Deno.env.get("BENCH_ROUNDS") ?? "2");
/** Tokens made for a run: more than wrk can send in one. */
const TOKENS = 200_000;

const key = crypto.getRandomValues(new Uint8Array(32));
const sealer = await createSealer(key);
let delivered = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  delivered++;
  return new Response("ok");
});
const service = await startBenchService(`http://127.0.0.1:${sink.addr.port}/hook`, {
  SUBMISSION_ENCRYPTION_KEY: key.toBase64(),
}, { destinations: 1 });
const admin = adminClient(() => service.origin, service.tenantKey);

/** wrk posting the bodies of `bodiesFile` (one per line) in turn; requests a second and non-2xx. */
async function run(
  bodiesFile: string | null,
): Promise<{ rps: number; non2xx: number; p99: string }> {
  const script = await Deno.makeTempFile({ suffix: ".lua" });
  await Deno.writeTextFile(
    script,
    `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n` +
      (bodiesFile === null ? `wrk.body = ${JSON.stringify(bodyWith(null))}\n` : `
local bodies = {}
for line in io.lines(${JSON.stringify(bodiesFile)}) do bodies[#bodies + 1] = line end
local i = 0
request = function()
  i = i + 1
  return wrk.format(nil, nil, nil, bodies[i % #bodies + 1])
end
`),
  );
  const output = await new Deno.Command("wrk", {
    args: [
      "-t1",
      "-c50",
      `-d${SECONDS}s`,
      "--latency",
      "-s",
      script,
      `${service.origin}/v1/f/${service.publicKey}`,
    ],
    stdout: "piped",
  }).output();
  await Deno.remove(script);
  const text = new TextDecoder().decode(output.stdout);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]),
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? "0"),
    p99: /^\s+99%\s+(\S+)/m.exec(text)?.[1] ?? "?",
  };
}

function bodyWith(token: string | null): string {
  const fields = { name: "Ada Lovelace", email: "ada@example.com", message: "" };
  const extra = token === null ? {} : { [TIME_TRAP_FIELD]: token };
  const prefix = JSON.stringify({ ...fields, ...extra }).length;
  return JSON.stringify({ ...fields, message: "x".repeat(Math.max(0, 200 - prefix)), ...extra });
}

try {
  console.log(
    `bench:page-token  ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ` +
      `${new Date().toISOString().slice(0, 10)}; wrk -t1 -c50 -d${SECONDS}s`,
  );
  const bodiesFile = await Deno.makeTempFile();
  for (let round = 1; round <= ROUNDS; round++) {
    await admin("PATCH", `/forms/${service.formId}`, { spamRules: null });
    const plain = await run(null);
    await admin("PATCH", `/forms/${service.formId}`, { spamRules: { minSeconds: 1 } });
    // Tokens of pages loaded 2 s ago, each a distinct millisecond: all first uses.
    const loaded = Date.now() - 2000;
    const lines = Array.from(
      { length: TOKENS },
      (_, i) => bodyWith(pageToken(sealer, service.publicKey, loaded - i)),
    );
    await Deno.writeTextFile(bodiesFile, lines.join("\n") + "\n");
    const trapped = await run(bodiesFile);
    console.log(
      `round ${round}: no trap ${
        plain.rps.toFixed(0)
      } req/s (p99 ${plain.p99}, non-2xx ${plain.non2xx}); ` +
        `trap, a fresh token each ${
          trapped.rps.toFixed(0)
        } req/s (p99 ${trapped.p99}, non-2xx ${trapped.non2xx}); ` +
        `ratio ${(trapped.rps / plain.rps).toFixed(3)}`,
    );
  }
  await Deno.remove(bodiesFile);
  console.log(`deliveries seen at the sink: ${delivered}`);
} finally {
  await service.stop();
  await sink.shutdown();
}
