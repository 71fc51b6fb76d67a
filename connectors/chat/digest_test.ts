import assert from "node:assert/strict";
import { deliveryRequest, ENVELOPE } from "../../tests/helpers/connector_sink.ts";
import { createDigestSender } from "./digest.ts";

/** A digest sender whose messages are recorded with their times and sizes. */
function recorder(minGapMs: number) {
  const sent: { at: number; size: number }[] = [];
  const sender = createDigestSender({
    maxPerMessage: 10,
    minGapMs,
    maxWaitMs: 10_000,
    send(envelopes) {
      sent.push({ at: performance.now(), size: envelopes.length });
      return Promise.resolve({ receipt: { statusCode: 204 }, holdMs: 0 });
    },
  });
  return { sent, sender };
}

Deno.test("deliveries arriving together at an idle line go as one message (a digest sent again after a kill repeats once)", async () => {
  const { sent, sender } = recorder(500);
  const request = deliveryRequest({});
  // Ten jobs woken by one sweep reach the connector one after another.
  const receipts = [];
  for (let i = 0; i < 10; i++) {
    receipts.push(sender.deliver({ ...request, envelope: { ...ENVELOPE } }));
    await new Promise((resolve) => queueMicrotask(() => resolve(null)));
  }
  await Promise.all(receipts);
  assert.deepEqual(sent.map((m) => m.size), [10]);
});

Deno.test("a destination shared by several processes gets its messages that many gaps apart", async () => {
  for (const senders of [1, 3]) {
    const { sent, sender } = recorder(100);
    const request = { ...deliveryRequest({}), senders };
    await sender.deliver(request);
    await sender.deliver(request);
    const gap = sent[1].at - sent[0].at;
    assert.ok(gap >= 100 * senders - 5, `${senders} sender(s): ${gap.toFixed(0)} ms apart`);
  }
});

Deno.test("the time a delivery waits in the line for its turn is formrelay's own wait, not the service's, also when it misses its turn", async () => {
  const sender = createDigestSender({
    maxPerMessage: 10,
    minGapMs: 300,
    maxWaitMs: 100,
    send: () => Promise.resolve({ receipt: { statusCode: 204 }, holdMs: 0 }),
  });
  const request = deliveryRequest({});
  const first = { ...request, ownWait: { ms: 0 } };
  await sender.deliver(first);
  // Only the gathering of an idle line (tens of ms) waited.
  assert.ok(first.ownWait.ms < 100, `first: ${first.ownWait.ms} ms`);
  // The next turn is 300 ms away, past the 100 ms it may wait: it misses it, and the
  // 100 ms and more it waited are formrelay's (the pace reads no slow receiver in them).
  const second = { ...request, ownWait: { ms: 0 } };
  await assert.rejects(sender.deliver(second), /Waited 0 s for the service's pace/);
  assert.ok(second.ownWait.ms >= 100, `missed its turn: ${second.ownWait.ms} ms`);
});
