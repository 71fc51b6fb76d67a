/**
 * Reliability: a flood on one tenant's form. Tenant X's form (two webhooks) is posted
 * to from many addresses by 40 clients at once for 8 s, with a low backlog bound; tenant
 * Y's form gets a steady trickle meanwhile. X's form is refused with 503 once its share
 * of the backlog is full, Y's submissions are all accepted and arrive promptly, and
 * every accepted submission of both arrives once.
 */
import assert from "node:assert/strict";
import { type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { waitFor } from "../helpers/wait.ts";
import { percentile, prepareWorkspace, submit, twoTenantForms } from "./helpers/cluster.ts";

const FLOOD_MS = 8_000;
const FLOOD_CLIENTS = 40;
/** X may fill 200 jobs (100 submissions to its two webhooks); Y the same. */
const BACKLOG_MAX_JOBS = 400;

Deno.test("a flood on one tenant's form is refused past its backlog share; another tenant's form is served", async () => {
  const workspace = await prepareWorkspace(2, {
    BACKLOG_MAX_JOBS: String(BACKLOG_MAX_JOBS),
    BACKLOG_ORG_SHARE: "0.5",
    CLIENT_IP_HEADER: "x-forwarded-for",
    RATE_LIMIT_MAX: "60",
  });
  // X's receiver is slow (a second an answer: its two webhooks take about 256 a second at
  // the destination's concurrency), so the flood outruns it and X's backlog fills even
  // though deliveries go on during the burst and admission waits a second for room.
  const xArrivals = new Map<string, number>();
  const slow = startWebhookSink(async (r) => {
    const id = r.headers.get("webhook-id")!;
    xArrivals.set(id, (xArrivals.get(id) ?? 0) + 1);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    return new Response("ok");
  });
  const yArrivedAt = new Map<string, number[]>();
  const fast = startWebhookSink((r) => {
    const id = r.headers.get("webhook-id")!;
    yArrivedAt.set(id, [...yArrivedAt.get(id) ?? [], Date.now()]);
    return new Response("ok");
  });
  let service: ServiceProcess | null = null;
  try {
    service = await startServiceProcess(workspace.env, { stderr: "piped" });
    const origin = service.origin;
    const { formX, formY } = await twoTenantForms(origin, workspace.orgs, {
      xSinkUrl: slow.url,
      ySinkUrl: fast.url,
    });

    let address = 0;
    /** A visitor's own address, as the trusted proxy would set it. */
    const visitor = () => ({
      "x-forwarded-for": `10.${address >> 16 & 255}.${address >> 8 & 255}.${++address & 255}`,
    });
    const floodEnd = Date.now() + FLOOD_MS;
    const xAccepted: string[] = [];
    const xStatuses = new Map<number, number>();
    const xRetryAfter = new Set<string | null>();
    const flood = Promise.all(Array.from({ length: FLOOD_CLIENTS }, async () => {
      while (Date.now() < floodEnd) {
        const result = await submit(origin, formX.publicKey, { flood: true }, visitor());
        xStatuses.set(result.status, (xStatuses.get(result.status) ?? 0) + 1);
        if (result.submissionId) xAccepted.push(result.submissionId);
        if (result.status === 503) xRetryAfter.add(result.retryAfter);
      }
    }));
    const ySentAt = new Map<string, number>();
    const yStatuses: number[] = [];
    while (Date.now() < floodEnd) {
      const at = Date.now();
      const result = await submit(origin, formY.publicKey, { steady: true }, visitor());
      yStatuses.push(result.status);
      if (result.submissionId) ySentAt.set(`${result.submissionId}.${formY.destinationIds[0]}`, at);
      // A visitor every 100 ms, as a steady trickle; not a synchronisation.
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await flood;

    const xExpected = xAccepted.flatMap((id) => formX.destinationIds.map((d) => `${id}.${d}`));
    await waitFor(
      () => xExpected.every((id) => xArrivals.has(id)) && ySentAt.size === yArrivedAt.size,
      {
        timeoutMs: 60_000,
        message: () =>
          `X ${xArrivals.size}/${xExpected.length}, Y ${yArrivedAt.size}/${ySentAt.size}`,
      },
    );
    const yLatencies = [...ySentAt].map(([id, at]) => yArrivedAt.get(id)![0] - at);
    console.log(
      `flood figures: X ${JSON.stringify(Object.fromEntries(xStatuses))} in ${FLOOD_MS} ms from ` +
        `${FLOOD_CLIENTS} clients (BACKLOG_MAX_JOBS ${BACKLOG_MAX_JOBS}); Y ${yStatuses.length} ` +
        `posts, 202 → arrival p50 ${percentile(yLatencies, 50)} ms, p99 ${
          percentile(yLatencies, 99)
        } ms`,
    );
    assert.ok((xStatuses.get(503) ?? 0) > 0, "the flooded form was refused with 503");
    assert.deepEqual([...xRetryAfter], ["10"], "every 503 says when to retry");
    assert.ok(xAccepted.length > 0, "the flooded form accepted what fitted");
    assert.deepEqual([...new Set(yStatuses)], [202], "every one of Y's submissions was accepted");
    // Every accepted submission arrived once at each destination, and nothing else came.
    assert.equal(xArrivals.size, xExpected.length);
    assert.deepEqual([...new Set(xArrivals.values())], [1], "no X delivery twice");
    assert.deepEqual(
      [...new Set([...yArrivedAt.values()].map((times) => times.length))],
      [1],
      "no Y delivery twice",
    );
    assert.ok(percentile(yLatencies, 50) < 1000, "Y's deliveries are not held up by X's flood");
  } finally {
    await service?.kill("SIGKILL");
    await slow.close();
    await fast.close();
    await workspace.remove();
  }
});
