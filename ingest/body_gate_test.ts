import assert from "node:assert/strict";
import { type BodyGate, createBodyGate } from "./body_gate.ts";
import { Refusal } from "./refusal.ts";

function admit(gate: BodyGate, key: string, bytes: number) {
  return gate.admit(key, bytes);
}

function refusal(gate: BodyGate, key: string, bytes: number) {
  try {
    gate.admit(key, bytes);
  } catch (error) {
    assert.ok(error instanceof Refusal);
    const { answer, message, retryAfter, closeConnection } = error;
    return { answer, message, retryAfter, closeConnection };
  }
  assert.fail("admitted");
}

const KB = 1024;

Deno.test("one client holds at most its share of the body budget, whoever else is there", () => {
  const gate = createBodyGate({ bodyMemoryBytes: 1024 * KB, bodyClientBytes: 256 * KB });
  admit(gate, "a", 128 * KB);
  admit(gate, "a", 128 * KB);
  assert.deepEqual(refusal(gate, "a", 1), {
    answer: "serverBusy",
    message: "Server busy: try again later",
    retryAfter: 1,
    closeConnection: true,
  });
  admit(gate, "b", 128 * KB);
  assert.deepEqual(gate.stats(), { bytes: 384 * KB, bodies: 3 });
});

Deno.test("a client's share is at most half the budget, however it is set", () => {
  const gate = createBodyGate({ bodyMemoryBytes: 256 * KB, bodyClientBytes: 1024 * KB });
  admit(gate, "a", 128 * KB);
  assert.equal(refusal(gate, "a", 1).answer, "serverBusy");
});

Deno.test("a full budget gives a newcomer the room of the oldest body arriving from the client holding the most", () => {
  const gate = createBodyGate({ bodyMemoryBytes: 512 * KB, bodyClientBytes: 256 * KB });
  const ended: string[] = [];
  const arriving = (key: string, name: string) => {
    const lease = admit(gate, key, 128 * KB);
    lease.reading(() => ended.push(name));
    return lease;
  };
  arriving("small", "small");
  arriving("big", "big-1");
  arriving("big", "big-2");
  arriving("other", "other");
  admit(gate, "visitor", 1 * KB);
  assert.deepEqual(ended, ["big-1"]);
  assert.deepEqual(gate.stats(), { bytes: 385 * KB, bodies: 4 });
  // Equal holders: the oldest body arriving gives way.
  admit(gate, "visitor-2", 128 * KB);
  assert.deepEqual(ended, ["big-1", "small"]);
});

Deno.test("a full budget of bodies already read refuses the newcomer: nothing being worked on is cut", () => {
  const gate = createBodyGate({ bodyMemoryBytes: 256 * KB, bodyClientBytes: 128 * KB });
  const ended: string[] = [];
  const a = admit(gate, "a", 128 * KB);
  const read = a.reading(() => ended.push("a"));
  read(); // its body is complete: being processed
  admit(gate, "b", 128 * KB); // admitted, its read not begun
  assert.equal(refusal(gate, "c", 1).answer, "serverBusy");
  assert.deepEqual(ended, []);
  a.release();
  admit(gate, "c", 1);
  assert.deepEqual(gate.stats(), { bytes: 128 * KB + 1, bodies: 2 });
});
