/**
 * bench:sweep — what a sweep costs with many unfinished jobs: every job of the deployment
 * is listed and decoded to find the due ones (store/due_jobs.ts listDueJobs; there is no
 * due-time index). For each size in BENCH_JOBS (default 20 000, 100 000 and 300 000:
 * the default backlog bound and beyond it, as paused destinations or a raised bound hold),
 * a fresh KV file gets that many jobs (two per submission, stored by formrelay's
 * submission writer), then two sweeps run that find none new (all of them already
 * waiting, as in a process holding its backlog). Prints each sweep's wall time, the JS
 * thread's CPU time (/proc), per job, and how long the background sweep then waits
 * before the next (delivery/sweep_schedule.ts).
 */
import { openDb } from "../store/db.ts";
import { listDueJobs } from "../store/due_jobs.ts";
import { createSealer } from "../store/sealing.ts";
import { submissionIdAt } from "../store/submission_id.ts";
import { createSubmissionWriter } from "../store/submissions.ts";
import { SWEEP_SHARE } from "../delivery/sweep_schedule.ts";
import { jsThreadCpuSeconds } from "./lib.ts";

const SIZES = (Deno.env.get("BENCH_JOBS") ?? "20000,100000,300000").split(",").map(Number);
const WRITES_AT_ONCE = 500;

/** A fresh KV file holding `jobs` unfinished jobs, two a submission. */
async function kvWithJobs(dir: string, jobs: number) {
  const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
  const db = await openDb(`${dir}/sweep.kv`, sealer, { queues: false });
  const writer = createSubmissionWriter(db);
  const form = { id: crypto.randomUUID(), orgId: crypto.randomUUID() };
  const destinations = [crypto.randomUUID(), crypto.randomUUID()]
    .map((id) => ({ id, type: "webhook" as const }));
  const sealedEnvelope = await sealer.seal(new TextEncoder().encode("x".repeat(400)), "bench");
  for (let stored = 0; stored < jobs; stored += 2 * WRITES_AT_ONCE) {
    await Promise.all(Array.from({ length: WRITES_AT_ONCE }, () => {
      const submittedAt = Date.now();
      return writer.write({
        submissionId: submissionIdAt(submittedAt),
        formId: form.id,
        orgId: form.orgId,
        sealedEnvelope,
        destinations,
        submittedAt,
        envelopeTtlMs: 24 * 3600 * 1000,
      });
    }));
  }
  return db;
}

console.log(
  `bench:sweep — sweeps finding nothing new among N unfinished jobs ` +
    `(${
      new Date().toISOString().slice(0, 10)
    }, ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno})`,
);
for (const jobs of SIZES) {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-sweep-" });
  const db = await kvWithJobs(dir, jobs);
  try {
    for (let run = 1; run <= 2; run++) {
      const started = performance.now();
      const cpuBefore = await jsThreadCpuSeconds(Deno.pid);
      const due = await listDueJobs(db, { now: Date.now(), limit: 10_000, skip: () => true });
      const cpuMs = (await jsThreadCpuSeconds(Deno.pid) - cpuBefore) * 1000;
      const wallMs = performance.now() - started;
      if (due.length !== 0) throw new Error(`a sweep found ${due.length} jobs, none expected`);
      const waitS = wallMs * (1 / SWEEP_SHARE - 1) / 1000;
      console.log(
        `${String(jobs).padStart(7)} jobs, sweep ${run}: ${wallMs.toFixed(0)} ms, JS thread ` +
          `${cpuMs.toFixed(0)} ms (${(cpuMs * 1000 / jobs).toFixed(1)} µs a job); ` +
          `the next background sweep waits ${waitS.toFixed(1)} s`,
      );
    }
  } finally {
    db.kv.close();
    await Deno.remove(dir, { recursive: true });
  }
}
