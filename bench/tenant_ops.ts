/**
 * bench:tenant-ops — what a tenant's resume or redelivery costs as other tenants' jobs
 * grow, and what the by-destination index costs each stored submission. On a file-backed
 * KV, through the store's own functions (no HTTP):
 *  1. a redelivery since a time of one destination holding 3 jobs, 50 calls, with 0,
 *     5 000 and 50 000 unfinished jobs of another organization; ms per call;
 *  2. submissions of two destinations stored 100 at a time (group commit), per second.
 * Run it from a checkout without the indexes for the comparison.
 */
import { createDb } from "../store/db.ts";
import { redeliver } from "../store/redelivery.ts";
import { createSealer } from "../store/sealing.ts";
import { createSubmissionWriter } from "../store/submissions.ts";

const CALLS = 50;
const WRITES = Number(Deno.env.get("BENCH_SUBMISSIONS") ?? "20000");

const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-" });
const kv = await Deno.openKv(`${dir}/formrelay.kv`);
const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
const writer = createSubmissionWriter(db);
console.log(
  `bench:tenant-ops  ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ` +
    new Date().toISOString().slice(0, 10),
);

function store(formId: string, orgId: string, destinationIds: string[], held = false) {
  return writer.write({
    submissionId: crypto.randomUUID(),
    formId,
    orgId,
    sealedEnvelope: new Uint8Array(700),
    destinations: destinationIds.map((id) => ({ id, type: "webhook" as const, held })),
    submittedAt: Date.now(),
    envelopeTtlMs: 3_600_000,
  });
}

try {
  // 1. A tenant's redelivery as another tenant's jobs grow.
  const ours = { formId: crypto.randomUUID(), destinationId: crypto.randomUUID() };
  for (let i = 0; i < 3; i++) await store(ours.formId, "ours", [ours.destinationId], true);
  const theirs = crypto.randomUUID();
  let others = 0;
  for (const total of [0, 5_000, 50_000]) {
    for (; others < total; others++) await store(crypto.randomUUID(), "theirs", [theirs]);
    const started = performance.now();
    for (let i = 0; i < CALLS; i++) {
      await redeliver(db, { ...ours, since: 0, now: Date.now() });
    }
    const ms = (performance.now() - started) / CALLS;
    console.log(`redelivery with ${total} jobs of another tenant: ${ms.toFixed(2)} ms a call`);
  }

  // 2. Stored submissions per second, two destinations each, 100 at a time.
  const destinations = [crypto.randomUUID(), crypto.randomUUID()];
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: 100 }, async () => {
    while (next < WRITES) {
      next++;
      await store("form", "org", destinations);
    }
  }));
  const perSecond = WRITES / ((performance.now() - started) / 1000);
  console.log(`stored: ${Math.round(perSecond)} submissions/s (two destinations each)`);
} finally {
  kv.close();
  await Deno.remove(dir, { recursive: true });
}
