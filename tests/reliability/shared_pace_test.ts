/**
 * Reliability: a receiver's `429` with `Retry-After`, answered to one process, holds every
 * process on the KV (they share their paces each second: store/process_shares.ts).
 */
import assert from "node:assert/strict";
import { type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { waitFor } from "../helpers/wait.ts";
import { adminClient, createFormWith, prepareWorkspace, submit } from "./helpers/cluster.ts";

const RETRY_AFTER_S = 4;
/** The others take up a hold within an exchange (a second), given this much on a busy machine. */
const TAKE_UP_MS = 2500;

Deno.test("a 429 with Retry-After answered to one process holds the other processes too", async () => {
  const workspace = await prepareWorkspace(1);
  const arrivals: number[] = [];
  const delivered = new Set<string>();
  let refusedAt: number | null = null;
  let refuseNext = false;
  const sink = startWebhookSink((received) => {
    const now = Date.now();
    arrivals.push(now);
    if (refuseNext) {
      refuseNext = false;
      refusedAt = now;
      return new Response("slow down", {
        status: 429,
        headers: { "retry-after": String(RETRY_AFTER_S) },
      });
    }
    delivered.add(received.headers.get("webhook-id") ?? "");
    return new Response("ok");
  });
  const processes: ServiceProcess[] = [];
  try {
    for (let i = 0; i < 2; i++) processes.push(await startServiceProcess(workspace.env));
    const admin = adminClient(() => processes[0].origin, workspace.orgs[0].tenantKey);
    const form = await createFormWith(admin, "Shared pace", [
      { type: "webhook", config: { url: `${sink.url}/hook` } },
    ]);
    // Both processes deliver to the destination, so each knows of the other.
    const accepted: string[] = [];
    const post = async (process: ServiceProcess) => {
      const result = await submit(process.origin, form.publicKey, { name: "Ada" });
      assert.equal(result.status, 202);
      accepted.push(result.submissionId!);
    };
    for (const process of processes) await post(process);
    await waitFor(() => delivered.size === 2, { message: "the first two delivered" });
    // The next request is refused; both processes keep posting, 4 a second for 6 s (after
    // the hold the receiver is kept to about a request a second per process: pace.ts).
    refuseNext = true;
    const start = Date.now();
    for (let i = 0; Date.now() - start < 6000; i++) {
      await post(processes[i % 2]);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    await waitFor(() => delivered.size === accepted.length, {
      timeoutMs: 60_000,
      message: () => `${accepted.length - delivered.size} not delivered`,
    });
    assert.ok(refusedAt !== null, "the receiver refused one request");
    const holdEnd = refusedAt + RETRY_AFTER_S * 1000;
    const duringHold = arrivals.filter((at) => at > refusedAt! + TAKE_UP_MS && at < holdEnd - 100);
    console.log(
      `shared pace figures: ${accepted.length} submissions; requests in the hold's last ` +
        `${RETRY_AFTER_S * 1000 - TAKE_UP_MS - 100} ms: ${duringHold.length}; ` +
        `in its first ${TAKE_UP_MS} ms: ${
          arrivals.filter((at) => at > refusedAt! && at <= refusedAt! + TAKE_UP_MS).length
        }`,
    );
    assert.equal(duringHold.length, 0, "no process sends while the receiver's hold lasts");
  } finally {
    for (const process of processes) await process.kill("SIGKILL");
    await sink.close();
    await workspace.remove();
  }
});
