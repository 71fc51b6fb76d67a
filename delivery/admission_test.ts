import assert from "node:assert/strict";
import { createAdmission } from "./admission.ts";

/** An admission over a backlog the test sets, per organization. */
function admissionOver(bound: { maxJobs: number; orgShare: number }) {
  const jobs = new Map<string, number>();
  let total = 0;
  const admission = createAdmission(
    (orgId) => ({ total, org: jobs.get(orgId) ?? 0 }),
    bound,
  );
  return {
    admission,
    set(orgId: string, count: number) {
      total += count - (jobs.get(orgId) ?? 0);
      jobs.set(orgId, count);
    },
  };
}

Deno.test("admit reserves room under the bound and its organization's share, and refuses past them", () => {
  const { admission, set } = admissionOver({ maxJobs: 4, orgShare: 0.5 });
  const first = admission.admit("A", 1);
  assert.notEqual(first, null);
  assert.notEqual(admission.admit("A", 1), null);
  assert.equal(admission.admit("A", 1), null, "A's share is 2");
  set("B", 2);
  assert.equal(admission.admit("C", 1), null, "the process's 4 are taken");
  first!();
  assert.notEqual(admission.admit("C", 1), null, "a released reservation is room again");
});

Deno.test("a waiter for room is admitted once jobs leave the backlog, in arrival order", async () => {
  const { admission, set } = admissionOver({ maxJobs: 10, orgShare: 0.2 });
  set("A", 2);
  const order: string[] = [];
  const first = admission.waitForRoom("A", 1, 60_000).then((room) => {
    order.push("first");
    return room;
  });
  const second = admission.waitForRoom("A", 1, 60_000).then((room) => {
    order.push("second");
    return room;
  });
  admission.freed();
  await Promise.resolve();
  assert.deepEqual(order, [], "nothing left yet");
  set("A", 1);
  admission.freed();
  const room = await first;
  assert.notEqual(room, null);
  assert.deepEqual(order, ["first"], "one job's room, one waiter");
  set("A", 0);
  admission.freed();
  assert.notEqual(await second, null);
  assert.deepEqual(order, ["first", "second"]);
});

Deno.test("a waiter of a full organization holds back no other organization's waiter", async () => {
  const { admission, set } = admissionOver({ maxJobs: 4, orgShare: 0.5 });
  set("A", 2);
  set("B", 2);
  let aRoom: (() => void) | null | undefined;
  const a = admission.waitForRoom("A", 1, 60_000).then((room) => aRoom = room);
  const b = admission.waitForRoom("B", 1, 60_000);
  set("B", 1);
  admission.freed();
  assert.notEqual(await b, null, "B had room");
  assert.equal(aRoom, undefined, "A is still full");
  set("A", 1);
  set("B", 0);
  admission.freed();
  await a;
  assert.notEqual(aRoom, null);
});

Deno.test("a waiter with no room in time gets null, and its room is not taken later", async () => {
  const { admission, set } = admissionOver({ maxJobs: 1, orgShare: 1 });
  set("A", 1);
  assert.equal(await admission.waitForRoom("A", 1, 20), null);
  set("A", 0);
  admission.freed();
  assert.notEqual(admission.admit("A", 1), null, "the timed-out waiter reserved nothing");
});
