/**
 * Reliability: two processes on one KV file, the self-hosted way to use more cores.
 * Submissions are posted alternately to both, 40 at a time; every one reaches every
 * destination exactly once, each process delivers, and no delivery run fails (a commit
 * refused because the other process wrote first is tried again, not given up).
 */
import assert from "node:assert/strict";
import { type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { countKeys } from "../helpers/kv.ts";
import { waitFor } from "../helpers/wait.ts";
import { adminClient, createFormWith, prepareWorkspace, submit } from "./helpers/cluster.ts";

const SUBMISSIONS = 3000;
const IN_FLIGHT = 40;
const PROCESSES = 2;

Deno.test("two processes on one KV file: submissions posted to both are each delivered once to every destination", async () => {
  const workspace = await prepareWorkspace(1);
  const copies = new Map<string, number>(); // webhook-id → copies received
  const sink = startWebhookSink((received) => {
    const id = received.headers.get("webhook-id") ?? "";
    copies.set(id, (copies.get(id) ?? 0) + 1);
    return new Response("ok");
  });
  const processes: ServiceProcess[] = [];
  try {
    for (let i = 0; i < PROCESSES; i++) processes.push(await startServiceProcess(workspace.env));
    const admin = adminClient(() => processes[0].origin, workspace.orgs[0].tenantKey);
    const form = await createFormWith(admin, "Two processes", [
      { type: "webhook", config: { url: `${sink.url}/a` } },
      { type: "webhook", config: { url: `${sink.url}/b` } },
    ]);

    const accepted: string[] = [];
    const statuses = new Map<number, number>();
    let next = 0;
    const started = Date.now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (next < SUBMISSIONS) {
        const origin = processes[next++ % PROCESSES].origin;
        const result = await submit(origin, form.publicKey, { email: "ada@example.org" });
        statuses.set(result.status, (statuses.get(result.status) ?? 0) + 1);
        if (result.submissionId !== null) accepted.push(result.submissionId);
      }
    }));
    assert.deepEqual([...statuses], [[202, SUBMISSIONS]], "every submission is accepted");

    const expected = accepted.flatMap((id) => form.destinationIds.map((d) => `${id}.${d}`));
    const missing = () => expected.filter((key) => !copies.has(key)).length;
    await waitFor(() => missing() === 0, {
      timeoutMs: 60_000,
      message: () => `${missing()} of ${expected.length} deliveries still missing`,
    });
    const endToEndMs = Date.now() - started;
    // Every job has ended: no copy can still come (a job whose result was not recorded
    // would stay in KV and be sent again once its lease expired).
    const watch = await Deno.openKv(workspace.env.KV_PATH);
    try {
      await waitFor(async () => await countKeys(watch, "jobs") === 0, {
        timeoutMs: 30_000,
        message: "jobs still in KV",
      });
    } finally {
      watch.close();
    }
    for (const process of processes) await process.kill("SIGTERM");

    const duplicated = [...copies.values()].reduce((sum, n) => sum + n - 1, 0);
    const deliveredBy = processes.map((process) =>
      process.lines.filter((line) =>
        line.includes('"msg":"delivery attempt"') && line.includes('"result":"delivered"')
      ).length
    );
    const errors = processes.flatMap((process) =>
      process.lines.filter((line) => line.includes('"level":"error"'))
    );
    console.log(
      `${SUBMISSIONS} submissions × ${form.destinationIds.length} destinations on ` +
        `${PROCESSES} processes: last arrival ${endToEndMs} ms after the first post; ` +
        `delivered per process ${deliveredBy.join(" / ")}; duplicated ${duplicated}`,
    );
    assert.equal(copies.size, expected.length, "nothing arrives that was not accepted");
    assert.equal(duplicated, 0, "no delivery arrives twice");
    assert.equal(
      deliveredBy.reduce((sum, n) => sum + n, 0),
      expected.length,
      "every delivery is recorded once, by one process",
    );
    assert.ok(deliveredBy.every((n) => n > 0), "both processes deliver");
    assert.deepEqual(errors.slice(0, 3), [], "no process logs an error");
  } finally {
    for (const process of processes) await process.kill("SIGKILL");
    await sink.close();
    await workspace.remove();
  }
});
