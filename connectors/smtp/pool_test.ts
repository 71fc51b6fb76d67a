import assert from "node:assert/strict";
import type { SmtpConnection } from "./client.ts";
import { waitFor } from "../../tests/helpers/wait.ts";
import { RelayGate, SmtpPool } from "./pool.ts";

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
  const options = { deadline: Date.now() + 1000, signal: never, timedOut };
  const leave = await gate.enter("relay", options);
  gate.slowDown("relay");
  gate.slowDown("relay");
  assert.equal(gate.limit("relay"), 2);
  gate.accepted("relay");
  gate.accepted("relay");
  assert.equal(gate.limit("relay"), 2, "used below its limit: no evidence for more");
  const second = await gate.enter("relay", options);
  gate.accepted("relay");
  gate.accepted("relay");
  assert.equal(gate.limit("relay"), 3, "one back per limit's worth accepted at the limit");
  second();
  leave();
  assert.equal(gate.limit("relay"), 3, "remembered while slowed");
});

Deno.test("RelayGate starts a relay low and grows it by one per round while it accepts at its limit, up to max", async () => {
  const gate = new RelayGate(2, 5);
  const options = { deadline: Date.now() + 1000, signal: never, timedOut };
  assert.equal(gate.limit("relay"), 2);
  const open = [await gate.enter("relay", options), await gate.enter("relay", options)];
  for (let round = 0; round < 20; round++) {
    while (open.length < gate.limit("relay")) open.push(await gate.enter("relay", options));
    for (let i = 0; i < gate.limit("relay"); i++) gate.accepted("relay");
  }
  assert.equal(gate.limit("relay"), 5, "grown to max and no further");
  for (const leave of open) leave();
  assert.equal(gate.limit("relay"), 5, "a grown relay is remembered when idle");
  const again = await gate.enter("relay", options);
  gate.slowDown("relay");
  assert.equal(gate.limit("relay"), 2);
  again();
});

Deno.test("RelayGate lets a session adopt a waiting message: it takes over the slot, and no abort ends its wait", async () => {
  const gate = new RelayGate<string>(1);
  const deadline = Date.now() + 10_000;
  const carrier = await gate.enter("relay", { deadline, signal: never, timedOut });
  const abort = new AbortController();
  const riding = gate.enter("relay", { deadline, signal: abort.signal, timedOut, rider: "b" });
  const plain = gate.enter("relay", { deadline, signal: never, timedOut });
  assert.equal(gate.adopt("relay", (rider) => rider === "x"), undefined, "no rider fits");
  const adopted = gate.adopt("relay", (rider) => rider === "b");
  assert.equal(adopted?.rider, "b");
  assert.equal(gate.adopt("relay", () => true), undefined, "a waiter without a rider stays");
  abort.abort(new Error("aborted too late"));
  adopted!.handOver(carrier);
  const release = await riding;
  assert.equal(release, carrier, "the carrier's slot, not a new one");
  let admitted = false;
  plain.then(() => admitted = true);
  await Promise.resolve();
  assert.equal(admitted, false, "one slot, still held");
  release();
  (await plain)();
  assert.equal(admitted, true);
});

Deno.test("RelayGate gives up waiting at the deadline", async () => {
  const gate = new RelayGate(1);
  await gate.enter("relay", { deadline: Date.now() + 1000, signal: never, timedOut });
  await assert.rejects(
    gate.enter("relay", { deadline: Date.now() + 20, signal: never, timedOut }),
    /timed out/,
  );
});

/** A session stand-in whose `closed` says the pool ended it. */
function idleSession(): SmtpConnection {
  const session = {
    closed: false,
    release() {},
    quitQuietly() {
      session.closed = true;
      return Promise.resolve();
    },
    close() {
      session.closed = true;
    },
  };
  return session as unknown as SmtpConnection;
}

Deno.test("SmtpPool ends each session idle for idleMs with one timer, the fresher ones later", async () => {
  let clock = 0;
  const pool = new SmtpPool({ idleMs: 20, maxIdlePerKey: 4, now: () => clock });
  const older = idleSession();
  const newer = idleSession();
  const other = idleSession();
  assert.ok(pool.put("relay", older));
  clock = 15;
  assert.ok(pool.put("relay", newer));
  assert.ok(pool.put("other", other));
  // When the timer fires, the first session has been idle 25 ms, the others 10.
  clock = 25;
  await waitFor(() => older.closed, { message: "the older session ended" });
  assert.equal(newer.closed, false, "the fresher session stays");
  assert.equal(other.closed, false);
  clock = 60;
  await waitFor(() => newer.closed && other.closed, { message: "the fresher sessions ended" });
  assert.equal(pool.take("relay"), undefined);
  assert.equal(pool.take("other"), undefined);
  // The timer went with the last session; a session put back sets it again.
  const later = idleSession();
  assert.ok(pool.put("relay", later));
  clock = 100;
  await waitFor(() => later.closed, { message: "the session put back ended" });
  assert.equal(pool.take("relay"), undefined);
  pool.close();
});
