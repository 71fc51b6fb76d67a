/**
 * bench:shares — what the processes of one deployment share, on a real KV file: four
 * processes (child processes of this one, each with its own KV handle, as a deployment's
 * processes are) exchange once a second for BENCH_SECONDS (20) what one tenant with
 * BENCH_DESTINATIONS (1 000) destinations on as many hosts makes them share: the usage
 * and the buckets' lacks of the outbound budget after a delivery to each destination in
 * every second, and the paces (BENCH_PACES: "fresh", a fresh destination's each, the
 * default; "cut", each cut once and growing back). Prints each process's record size
 * (its JSON, summed over its chunks), the bytes each exchange read, and the exchange's
 * p50/p99 over all four, and the exchanges that failed.
 */
import { createOutboundBudget } from "../delivery/outbound_budget.ts";
import { testConfig } from "../tests/helpers/config.ts";
import { createDb } from "../store/db.ts";
import { createShareExchange, type PaceShare } from "../store/process_shares.ts";
import { createSealer } from "../store/sealing.ts";

const PROCESSES = 4;
const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "20");
const DESTINATIONS = Number(Deno.env.get("BENCH_DESTINATIONS") ?? "1000");
const PACES = Deno.env.get("BENCH_PACES") ?? "fresh";

interface ChildReport {
  ms: number[];
  failed: number;
  errors: string[];
  recordBytes: number;
  readBytes: number[];
}

/** One process: exchanges once a second, as the engine does; reports its timings. */
async function child(kvPath: string, index: number): Promise<ChildReport> {
  const kv = await Deno.openKv(kvPath);
  const db = createDb(kv, await createSealer(new Uint8Array(32)));
  const budget = createOutboundBudget(db, testConfig());
  const processId = `p${index}`;
  const shares = createShareExchange(db, { processId, freshMs: 3000, freshLimit: 1 });
  const paces = new Map<string, PaceShare>(
    Array.from({ length: DESTINATIONS }, (_, i) => [
      `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`,
      PACES === "fresh" ? { limit: 1, heldUntil: 0, congestedAt: 0, rate: null } : {
        limit: 3.517,
        heldUntil: 0,
        congestedAt: Date.now() - 60_000,
        rate: null,
      },
    ]),
  );
  const report: ChildReport = { ms: [], failed: 0, errors: [], recordBytes: 0, readBytes: [] };
  const orgId = "7d3c1a52-0f7e-4a55-9a8e-3f1d6c2b9e41";
  const start = Date.now();
  for (let second = 0; second < SECONDS; second++) {
    const due = start + second * 1000;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    for (let i = 0; i < DESTINATIONS; i++) {
      const host = `h${i}.tenant-${index}.example`;
      await budget.take({ orgId, host, bytes: 2000, relayRecipients: 0 }, Date.now());
    }
    const began = performance.now();
    try {
      const mine = { paces, usage: budget.usage(), debts: budget.debts?.(Date.now()) };
      const others = await shares.exchange(mine);
      report.ms.push(performance.now() - began);
      if ((others as { writeError?: unknown }).writeError !== undefined) {
        report.failed++;
        report.errors.push(String((others as { writeError?: unknown }).writeError));
      }
      budget.charge(others.usage, Date.now());
    } catch (error) {
      report.ms.push(performance.now() - began);
      report.failed++;
      report.errors.push(String(error));
    }
    // What an exchange reads: the others' records as they stand.
    let read = 0;
    for await (const entry of kv.list({ prefix: ["process_shares"] })) {
      if (entry.key[1] !== processId) read += JSON.stringify(entry.value).length;
    }
    report.readBytes.push(read);
  }
  let own = 0;
  for await (const entry of kv.list({ prefix: ["process_shares", processId] })) {
    own += JSON.stringify(entry.value).length;
  }
  report.recordBytes = own;
  await shares.withdraw().catch(() => {});
  kv.close();
  return report;
}

const [mode, kvPath, index] = Deno.args;
if (mode === "child") {
  console.log(JSON.stringify(await child(kvPath, Number(index))));
  Deno.exit(0);
}

const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-shares-" });
const path = `${dir}/shares.kv`;
const children = Array.from({ length: PROCESSES }, (_, i) =>
  new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--unstable-kv",
      new URL(import.meta.url).pathname,
      "child",
      path,
      String(i),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output());
const reports: ChildReport[] = (await Promise.all(children)).map((out) =>
  JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!)
);
await Deno.remove(dir, { recursive: true });

const all = reports.flatMap((r) => r.ms.slice(1)).sort((a, b) => a - b);
const at = (q: number) => all[Math.min(all.length - 1, Math.floor(q * all.length))];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(
  `bench:shares — ${PROCESSES} processes on one KV file, one tenant's ${DESTINATIONS} ` +
    `destinations on as many hosts, paces ${PACES}, ${SECONDS} exchanges each; ` +
    `${Deno.build.os} ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ` +
    new Date().toISOString().slice(0, 16),
);
reports.forEach((r, i) =>
  console.log(
    `process ${i}: record ${r.recordBytes} bytes (JSON), read a second (median) ` +
      `${median(r.readBytes)} bytes, failed exchanges ${r.failed}` +
      (r.errors.length > 0 ? ` (${r.errors[0]})` : ""),
  )
);
console.log(
  `exchange p50 ${at(0.5).toFixed(1)} ms, p99 ${at(0.99).toFixed(1)} ms ` +
    `(the first of each process left out: it joins)`,
);
