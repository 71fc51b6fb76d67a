import assert from "node:assert/strict";
import { RelayGate } from "./pool.ts";

const never = new AbortController().signal;
const timedOut = () => new Error("timed out");

Deno.test("RelayGate lets `max` sessions to a relay open at once; the next waits for one to end", async () => {
  const gate = new RelayGate(2);
  const deadline = Date.now() + 10_000;
  const first = await gate.enter("relay", { deadline, signal: never, timedOut });
  await gate.enter("relay", { deadline, signal: never, timedOut });
  await gate.enter("other", { deadline, signal: never, timedOut });
  let third = false;
  const waiting = gate.enter("relay", { deadline, signal: never, timedOut }).then((leave) => {
    third = true;
    return leave;
  });
  await Promise.resolve();
  assert.equal(third, false, "a third session to the same relay waits");
  first();
  first();
  (await waiting)();
  assert.equal(third, true);
});

Deno.test("RelayGate halves a relay's sessions when it says 421/451, and gives them back as it accepts", async () => {
  const gate = new RelayGate(8);
  gate.slowDown("relay");
  gate.slowDown("relay");
  assert.equal(gate.limit("relay"), 8, "a relay with no session is not tracked");
  const leave = await gate.enter("relay", { deadline: Date.now() + 1000, signal: never, timedOut });
  gate.slowDown("relay");
  gate.slowDown("relay");
  assert.equal(gate.limit("relay"), 2);
  for (let i = 0; i < 8; i++) gate.accepted("relay");
  assert.equal(gate.limit("relay"), 3, "one back per eight accepted");
  leave();
  assert.equal(gate.limit("relay"), 3, "remembered while slowed");
});

Deno.test("RelayGate gives up waiting at the deadline", async () => {
  const gate = new RelayGate(1);
  await gate.enter("relay", { deadline: Date.now() + 1000, signal: never, timedOut });
  await assert.rejects(
    gate.enter("relay", { deadline: Date.now() + 20, signal: never, timedOut }),
    /timed out/,
  );
});
