/**
 * Reliability: two processes on one KV file, the self-hosted way to use more cores.
 * Submissions are posted alternately to both, 40 at a time. Every one reaches every
 * destination exactly once, each process delivers, and no delivery run fails (a commit
 * refused because the other process wrote first is tried again, not given up). When one
 * process is SIGKILLed under load, the other delivers every job it had accepted.
 */
import assert from "node:assert/strict";
import { deliveredBy, type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink, type WebhookSink } from "../helpers/sink.ts";
import { waitFor } from "../helpers/wait.ts";
import {
  adminClient,
  createFormWith,
  prepareWorkspace,
  submit,
  waitForNoJobs,
} from "./helpers/cluster.ts";

const IN_FLIGHT = 40;

/** Two processes on one KV file, a form with two webhooks on one sink, arrivals by webhook-id. */
async function startPair(options: { answerDelayMs?: number } = {}) {
  const workspace = await prepareWorkspace(1);
  const arrivals = new Map<string, number[]>(); // webhook-id → arrival times (ms)
  const sink: WebhookSink = startWebhookSink(async (received) => {
    const id = received.headers.get("webhook-id") ?? "";
    arrivals.set(id, [...arrivals.get(id) ?? [], Date.now()]);
    if (options.answerDelayMs) await new Promise((r) => setTimeout(r, options.answerDelayMs));
    return new Response("ok");
  });
  const processes: ServiceProcess[] = [];
  for (let i = 0; i < 2; i++) processes.push(await startServiceProcess(workspace.env));
  const admin = adminClient(() => processes[0].origin, workspace.orgs[0].tenantKey);
  const form = await createFormWith(admin, "Two processes", [
    { type: "webhook", config: { url: `${sink.url}/a` } },
    { type: "webhook", config: { url: `${sink.url}/b` } },
  ]);
  return { workspace, sink, arrivals, processes, form };
}

/**
 * Posts `count` submissions IN_FLIGHT at a time, alternately to the processes `targets()`
 * names (asked again for every post); `onPosted` hears how many were posted so far.
 */
async function postAlternately(
  pair: Awaited<ReturnType<typeof startPair>>,
  options: { count: number; targets: () => ServiceProcess[]; onPosted?: (n: number) => void },
) {
  const accepted: string[] = [];
  /** Submission id → origin of the process that accepted it. */
  const acceptedBy = new Map<string, string>();
  const statuses = new Map<number | string, number>();
  let next = 0;
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next < options.count) {
      const targets = options.targets();
      const origin = targets[next++ % targets.length].origin;
      options.onPosted?.(next);
      let status: number | string;
      try {
        const result = await submit(origin, pair.form.publicKey, { email: "ada@example.org" });
        status = result.status;
        if (result.submissionId !== null) {
          accepted.push(result.submissionId);
          acceptedBy.set(result.submissionId, origin);
        }
      } catch {
        status = "no answer"; // a killed process: not accepted (it may still have been stored)
      }
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  }));
  return { accepted, acceptedBy, statuses };
}

/** Waits until every delivery of `accepted` arrived and no job is left in KV (none can come again). */
async function waitForAll(pair: Awaited<ReturnType<typeof startPair>>, accepted: string[]) {
  const expected = accepted.flatMap((id) => pair.form.destinationIds.map((d) => `${id}.${d}`));
  const missing = () => expected.filter((key) => !pair.arrivals.has(key)).length;
  await waitFor(() => missing() === 0, {
    timeoutMs: 60_000,
    message: () => `${missing()} of ${expected.length} deliveries still missing`,
  });
  await waitForNoJobs(pair.workspace.env.KV_PATH);
  return expected;
}

Deno.test("two processes on one KV file: submissions posted to both are each delivered once to every destination", async () => {
  const pair = await startPair();
  const { processes } = pair;
  try {
    const submissions = 3000;
    const started = Date.now();
    const { accepted, statuses } = await postAlternately(pair, {
      count: submissions,
      targets: () => processes,
    });
    assert.deepEqual([...statuses], [[202, submissions]], "every submission is accepted");
    const expected = await waitForAll(pair, accepted);
    const lastArrival = Math.max(...[...pair.arrivals.values()].flat());
    for (const process of processes) await process.kill("SIGTERM");

    const duplicated = [...pair.arrivals.values()].reduce((sum, t) => sum + t.length - 1, 0);
    const delivered = processes.map((process) => deliveredBy(process).size);
    const errors = processes.flatMap((process) =>
      process.lines.filter((line) => line.includes('"level":"error"'))
    );
    console.log(
      `${submissions} submissions × 2 destinations on 2 processes: last arrival ` +
        `${lastArrival - started} ms after the first post; delivered per process ` +
        `${delivered.join(" / ")}; duplicated ${duplicated}`,
    );
    assert.equal(pair.arrivals.size, expected.length, "nothing arrives that was not accepted");
    assert.equal(duplicated, 0, "no delivery arrives twice");
    assert.equal(
      delivered[0] + delivered[1],
      expected.length,
      "each recorded once, by one process",
    );
    assert.ok(delivered.every((n) => n > 0), "both processes deliver");
    assert.deepEqual(errors.slice(0, 3), [], "no process logs an error");
  } finally {
    for (const process of processes) await process.kill("SIGKILL");
    await pair.sink.close();
    await pair.workspace.remove();
  }
});

Deno.test("two processes on one KV file: when one is SIGKILLed under load, the other delivers every job it had accepted", async () => {
  // Slow answers keep deliveries in flight, so the killed process leaves leased jobs too.
  const pair = await startPair({ answerDelayMs: 50 });
  const { processes } = pair;
  const [survivor, victim] = processes;
  try {
    const submissions = 1000;
    let killedAt: number | null = null;
    let kill: Promise<void> | null = null;
    const { accepted, acceptedBy, statuses } = await postAlternately(pair, {
      count: submissions,
      targets: () => kill === null ? processes : [survivor],
      onPosted(n) {
        if (n !== submissions / 2) return;
        kill = victim.kill("SIGKILL").then(() => {
          killedAt = Date.now();
        });
      },
    });
    await kill;
    await waitForAll(pair, accepted);
    await survivor.kill("SIGTERM");

    const fromVictim = new Set(accepted.filter((id) => acceptedBy.get(id) === victim.origin));
    const survivorDone = deliveredBy(survivor);
    const victimDone = deliveredBy(victim);
    // Jobs the victim had accepted and not finished: the survivor's sweep took them over.
    const takenOver = [...survivorDone].filter((key) =>
      fromVictim.has(key.split(".")[0]) && !victimDone.has(key)
    );
    // A second copy is allowed only for a delivery the victim had sent and not recorded
    // when it was killed: its first copy arrived before the kill.
    const duplicates = [...pair.arrivals].filter(([, times]) => times.length > 1);
    const late = duplicates.filter(([, times]) => times[0] > killedAt! + 1000);
    console.log(
      `SIGKILL after ${submissions / 2} of ${submissions} posts: ${
        JSON.stringify([...statuses])
      }; ` +
        `deliveries the survivor took over: ${takenOver.length}; duplicates ${duplicates.length}, ` +
        `of which not cut short by the kill ${late.length}`,
    );
    assert.ok(takenOver.length > 0, "the survivor took over jobs of the killed process");
    assert.deepEqual(late.map(([key]) => key), [], "no other duplicates");
  } finally {
    for (const process of processes) await process.kill("SIGKILL");
    await pair.sink.close();
    await pair.workspace.remove();
  }
});
