/**
 * One tenant's template costs no other tenant: organization A's Slack destination has the
 * worst template it can save (one field named 341 times) and receives 20 submissions
 * whose field is 120 000 `&` (the escape that grows most); organization B's form,
 * probed meanwhile, answers with a p99 within 100 ms of its own before, and the
 * service's RSS stays within 100 MB of where it was.
 */
import assert from "node:assert/strict";
import { startChatReceiver } from "../helpers/chat_receivers.ts";
import { deliveredBy, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { waitFor } from "../helpers/wait.ts";
import { rssMb, watchRss } from "./helpers/attackers.ts";
import {
  adminClient,
  createFormWith,
  percentile,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";

/** Organization B's probes in each phase (p99 of 100 is the second slowest). */
const PROBES = 100;

Deno.test("20 posts through the worst template leave another organization's p99 and RSS where they were", async () => {
  await using slack = startChatReceiver("slack");
  await using sink = startWebhookSink();
  const workspace = await prepareWorkspace(2);
  const [orgA, orgB] = workspace.orgs;
  const service = await startServiceProcess(workspace.env);
  let peak: ReturnType<typeof watchRss> | null = null;
  try {
    const formA = await createFormWith(adminClient(() => service.origin, orgA.tenantKey), "A", [
      { type: "slack", config: { url: slack.url, template: "{{fields.x}}".repeat(341) } },
    ]);
    const formB = await createFormWith(adminClient(() => service.origin, orgB.tenantKey), "B", [
      { type: "webhook", config: { url: sink.url } },
    ]);
    /** One of B's submissions, timed. */
    const probe = async () => {
      const started = performance.now();
      const { status } = await submit(service.origin, formB.publicKey, { name: "Ada" });
      assert.equal(status, 202);
      return performance.now() - started;
    };

    for (let i = 0; i < 20; i++) await probe();
    const before: number[] = [];
    for (let i = 0; i < PROBES; i++) before.push(await probe());
    const rssBefore = await rssMb(service.child.pid);
    peak = watchRss(service.child.pid);

    // A's 20 posts one after another (the door takes a few 120 KB bodies at a time), each a
    // field of 120 000 `&`, while B keeps probing.
    const posts = (async () => {
      const statuses: number[] = [];
      for (let i = 0; i < 20; i++) {
        statuses.push(
          (await submit(service.origin, formA.publicKey, { x: "&".repeat(120_000) })).status,
        );
      }
      return statuses;
    })();
    const delivered = () =>
      [...deliveredBy(service)].filter((id) => id.endsWith(`.${formA.destinationIds[0]}`)).length;
    const during: number[] = [];
    while (during.length < PROBES || delivered() < 20) {
      during.push(await probe());
      if (during.length > 20 * PROBES) break;
    }
    assert.deepEqual(await posts, Array(20).fill(202));
    await waitFor(() => delivered() === 20, {
      message: () => `${delivered()} of A's 20 delivered`,
      timeoutMs: 60_000,
    });
    const rssPeak = await peak.stop();

    assert.deepEqual(slack.refused, []);
    for (const message of slack.accepted) {
      const text = JSON.stringify(message);
      assert.ok(text.includes("&amp;".repeat(100)) && text.includes("…"), "the value, cut");
      assert.ok(text.length < 40_000, `a Slack message of ${text.length} characters`);
    }
    const p99Before = percentile(before, 99);
    const p99During = percentile(during, 99);
    console.log(
      `worst template: B's p99 ${p99Before.toFixed(0)} ms before, ${p99During.toFixed(0)} ms ` +
        `during A's 20 posts (${during.length} probes, max ${
          Math.max(...during).toFixed(0)
        } ms); ` +
        `RSS ${rssBefore.toFixed(0)} MB before, peak ${rssPeak.toFixed(0)} MB; ` +
        `${slack.accepted.length} Slack messages`,
    );
    assert.ok(p99During <= p99Before + 100, `p99 ${p99During} ms against ${p99Before} ms`);
    assert.ok(rssPeak <= rssBefore + 100, `RSS peak ${rssPeak} MB against ${rssBefore} MB`);
  } finally {
    await peak?.stop();
    await service.kill("SIGKILL");
    await workspace.remove();
  }
});
