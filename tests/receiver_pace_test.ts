/**
 * Each destination's pace end to end (delivery/pace.ts): a refusal for rate holds that
 * destination's whole queue for its Retry-After while others go on, its submissions
 * are delivered once each with the refused attempt uncounted, and refusals for rate
 * never count toward the destination's failing span.
 */
import assert from "node:assert/strict";
import type { FailingRecord } from "../store/destination_health.ts";
import { destinationFailingKey } from "../store/keys.ts";
import { destinationView, outcomeViews, webhook } from "./helpers/deliveries.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";
import { startChatReceiver } from "./helpers/chat_receivers.ts";
import { createShareExchange } from "../store/process_shares.ts";

Deno.test("a 429 with Retry-After holds its destination's whole queue, not another's; each submission is delivered once, the refusal uncounted", async () => {
  // One in flight at most, so that every later request starts after the refusal.
  await using h = await startHarness({ pace: { initial: 1, max: 1 } });
  let refusedAt = 0;
  const limitedHits: number[] = [];
  await using limited = startWebhookSink((_, hit) => {
    limitedHits.push(Date.now());
    if (hit > 1) return new Response("ok");
    refusedAt = Date.now();
    return new Response("slow down", { status: 429, headers: { "retry-after": "1" } });
  });
  const otherHits: number[] = [];
  await using other = startWebhookSink(() => {
    otherHits.push(Date.now());
    return new Response("ok");
  });
  const form = await h.createForm();
  const limitedId = await h.addDestination(form.id, webhook(limited.url));
  await h.addDestination(form.id, webhook(other.url));
  for (let i = 0; i < 5; i++) assert.equal((await h.submit(form.publicKey, { i })).status, 202);

  await waitFor(async () => {
    const outcomes = await outcomeViews(h, form.id);
    return outcomes.filter((o) => o.status === "delivered").length === 10;
  }, { message: "all ten delivered" });
  assert.equal(limited.hits, 6, "one refusal, then each submission once");
  for (const at of limitedHits.slice(1)) {
    assert.ok(at - refusedAt >= 1000, `a request ${at - refusedAt} ms after the 429`);
  }
  assert.equal(other.received.length, 5);
  assert.ok(
    otherHits.every((at) => at - refusedAt < 1000),
    "the other destination was not held",
  );
  const outcomes = await outcomeViews(h, form.id);
  assert.deepEqual(outcomes.map((o) => o.attempts), Array(10).fill(1), "the refusal is uncounted");
  const view = await destinationView(h, form.id, limitedId) as unknown as {
    pace: { concurrency: number; inFlight: number; ratePerSecond: number | null };
  };
  assert.equal(view.pace.concurrency, 1);
  assert.equal(view.pace.inFlight, 0);
  assert.equal(typeof view.pace.ratePerSecond, "number", "paced to a rate since it refused");
});

Deno.test("refusals for rate do not count toward the destination's failing span", async () => {
  // The shortest span: were a refusal counted, the second would pause the destination.
  await using h = await startHarness({ pauseAfterMs: 1, pace: { initial: 1, max: 1 } });
  await using sink = startWebhookSink((_, hit) =>
    hit <= 2
      ? new Response("slow down", { status: 429, headers: { "retry-after": "0" } })
      : new Response("ok")
  );
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  assert.equal((await h.submit(form.publicKey, { name: "Ada" })).status, 202);
  await waitFor(
    async () => (await outcomeViews(h, form.id)).some((o) => o.status === "delivered"),
    {
      message: "delivered after two refusals",
    },
  );
  assert.equal(sink.hits, 3);
  const [outcome] = await outcomeViews(h, form.id);
  assert.equal(outcome.attempts, 1);
  const view = await destinationView(h, form.id, id);
  assert.deepEqual(view.health, { state: "healthy", reason: null, since: null });
  const failing = await h.service.db.kv.get<FailingRecord>(destinationFailingKey(id));
  assert.equal(failing.value, null, "no failing record was started");
});

Deno.test("a busy thread does not cut the concurrency of receivers that answer at once", async () => {
  const max = 16;
  await using h = await startHarness({
    pace: { initial: 2, max },
    rateLimit: { max: 0, windowMs: 60_000 },
  });
  await using sink = startWebhookSink();
  const form = await h.createForm();
  const id = await h.addDestination(form.id, webhook(sink.url));
  const engine = h.service.engine!;
  // The thread blocked for 80 ms out of every 90: every answer waits for it, far past the
  // pace's threshold for rising latency (twice the lowest plus LATENCY_SLACK_MS).
  const seen: number[] = [];
  const hog = setInterval(() => {
    seen.push(engine.pace(id).concurrency);
    const until = performance.now() + 80;
    while (performance.now() < until) { /* busy, as a burst of ingestion keeps it */ }
  }, 10);
  const count = 150;
  try {
    for (let i = 0; i < count; i++) {
      assert.equal((await h.submit(form.publicKey, { i })).status, 202);
    }
    await waitFor(() => sink.received.length === count, {
      timeoutMs: 60_000,
      message: () => `${sink.received.length} of ${count} delivered`,
    });
  } finally {
    clearInterval(hog);
  }
  seen.push(engine.pace(id).concurrency);
  // The attempts did take that long, as the attempt itself measures it.
  const slow = h.logs.filter((line) => line.includes('"delivery attempt"'))
    .map((line) => JSON.parse(line).ms as number).filter((ms) => ms >= 80);
  assert.ok(slow.length > count / 4, `only ${slow.length} attempts took 80 ms or more`);
  // It grows as far as the demand takes it (to the cap on a quiet machine; a loaded one
  // may deliver the 150 before), and the thread's stalls cut nothing. Measuring them
  // cut it again and again; on a machine busy with other work, a wait for the CPU the
  // loop cannot see may still read as the receiver's latency once (a tenth off).
  assert.ok(seen.at(-1)! > 2, `grew: ${seen.join(" ")}`);
  const cuts = seen.filter((limit, i) => i > 0 && limit < seen[i - 1]).length;
  assert.ok(cuts <= 1, `cut ${cuts} times: ${seen.join(" ")}`);
  assert.ok(seen.at(-1)! >= 0.85 * Math.max(...seen), `kept: ${seen.join(" ")}`);
});

Deno.test("a chat destination shared by four processes keeps its concurrency while its deliveries wait for their turns, and misses of a turn cut nothing", async () => {
  // A turn is at most 1 s away (two thirds of the time-out), the gap between two messages
  // of this process 2 s (Discord's 500 ms × 4 senders): a delivery that comes just after
  // a message misses the next turn and is retried. Both waits are formrelay's own.
  await using h = await startHarness({
    httpTimeoutMs: 1500,
    pace: { initial: 8, max: 16 },
    retryScheduleMs: Array(30).fill(500),
    rateLimit: { max: 0, windowMs: 60_000 },
  });
  await using receiver = startChatReceiver("discord");
  const form = await h.createForm();
  const id = await h.addDestination(form.id, { type: "discord", config: { url: receiver.url } });
  // Three other processes on the KV deliver to it too, as their shared records say.
  const others = ["p1", "p2", "p3"].map((processId) =>
    createShareExchange(h.service.db, { processId, freshMs: 3000 })
  );
  const share = () =>
    Promise.all(others.map((other) =>
      other.exchange({
        paces: new Map([[id, { limit: 4, heldUntil: 0, congestedAt: 0, rate: null }]]),
        usage: [],
      })
    ));
  // One exchange at a time, each awaited before the harness closes.
  let shared = share();
  await shared;
  const engine = h.service.engine!;
  const seen: number[] = [];
  const keepSharing = setInterval(() => shared = shared.then(share), 500);
  const sample = setInterval(() => seen.push(engine.pace(id).concurrency), 50);
  const count = 24;
  try {
    // Four submissions a second for six seconds.
    const start = Date.now();
    for (let i = 0; i < count; i++) {
      const due = start + i * 250;
      if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
      assert.equal((await h.submit(form.publicKey, { token: `tok${i}x` })).status, 202);
    }
    const delivered = () =>
      receiver.accepted.flatMap((m) => JSON.stringify(m).match(/tok\d+x/g) ?? []);
    await waitFor(() => new Set(delivered()).size === count, {
      timeoutMs: 30_000,
      message: () =>
        `${new Set(delivered()).size} of ${count} in ${receiver.accepted.length} messages`,
    });
  } finally {
    clearInterval(keepSharing);
    clearInterval(sample);
    await shared;
    await Promise.all(others.map((other) => other.withdraw()));
  }
  assert.ok(engine.pace(id).concurrency >= 4, `its part, 16 / 4: ${seen.join(" ")}`);
  // Never cut below its part of the cap (16 among four processes).
  assert.ok(
    seen.every((c, i) => i === 0 || c >= Math.min(4, seen[i - 1])),
    `cut: ${seen.join(" ")}`,
  );
});
