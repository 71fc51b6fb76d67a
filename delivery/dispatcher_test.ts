import assert from "node:assert/strict";
import type { JobRef } from "../store/job_record.ts";
import { waitFor } from "../tests/helpers/wait.ts";
import {
  BURST_PAUSE_MS,
  createDispatcher,
  type DispatcherOptions,
  MAX_RECORDING,
} from "./dispatcher.ts";

/** A dispatcher whose runs wait until the test ends them, recording the order they started in. */
function harness(options: Partial<DispatcherOptions> = {}) {
  const started: JobRef[] = [];
  const runs = new Map<string, { ref: JobRef; release: () => void; done: () => void }>();
  const errors: unknown[] = [];
  let rooms = 0;
  const dispatcher = createDispatcher({
    concurrency: 4,
    orgShare: 1,
    maxWaiting: 1000,
    run(ref, release) {
      started.push(ref);
      const { promise, resolve } = Promise.withResolvers<void>();
      runs.set(ref.submissionId, { ref, release, done: resolve });
      return promise;
    },
    onError: (_, error) => errors.push(error),
    onRoom: () => rooms++,
    ...options,
  });
  return {
    dispatcher,
    started,
    errors,
    rooms: () => rooms,
    /** Ends a run (slot and recording) and lets the dispatcher react. */
    async end(submissionId: string) {
      const { ref, done } = runs.get(submissionId)!;
      done();
      runs.delete(submissionId);
      await waitFor(() => !dispatcher.has(ref));
    },
    /** Gives a run's slot back without ending it (as before recording its result). */
    release(submissionId: string) {
      runs.get(submissionId)!.release();
    },
    /** Ends every run, and those they make room for, until none is left. */
    async drain() {
      while (runs.size > 0) {
        for (const id of [...runs.keys()]) await this.end(id);
      }
    },
  };
}

let sequence = 0;
/** `count` jobs to one destination (of organization `orgId`). */
function jobs(destinationId: string, count: number, orgId = "org"): JobRef[] {
  return Array.from({ length: count }, () => ({
    submittedAt: 1,
    submissionId: `s${++sequence}`,
    destinationId,
    orgId,
  }));
}

const destinationsOf = (refs: JobRef[]) => refs.map((ref) => ref.destinationId);

Deno.test("the dispatcher runs at most `concurrency` jobs and starts the next as one ends", async () => {
  const h = harness();
  const a = jobs("a", 3), b = jobs("b", 3), c = jobs("c", 3);
  h.dispatcher.wake([...a, ...b, ...c]);
  assert.equal(h.started.length, 4);
  assert.deepEqual(h.dispatcher.stats(), { active: 4, waiting: 5 });
  await h.end(h.started[0].submissionId);
  assert.equal(h.started.length, 5);
  await h.drain();
  assert.equal(h.started.length, 9);
  await h.dispatcher.close();
});

Deno.test("a destination holds at most half the slots, so another one still gets through", async () => {
  const h = harness();
  h.dispatcher.wake(jobs("slow", 10));
  assert.equal(h.started.length, 2, "half of 4 slots");
  h.dispatcher.wake(jobs("fast", 1));
  assert.deepEqual(destinationsOf(h.started), ["slow", "slow", "fast"]);
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("a job woken twice runs once while it waits or runs", async () => {
  const h = harness();
  const [job] = jobs("a", 1);
  h.dispatcher.wake([job]);
  h.dispatcher.wake([{ ...job }]);
  assert.equal(h.started.length, 1);
  assert.ok(h.dispatcher.has(job));
  await h.end(job.submissionId);
  assert.ok(!h.dispatcher.has(job), "forgotten once it ended");
  await h.dispatcher.close();
});

Deno.test("the jobs of one submission are known apart: each runs once and is forgotten when it ends", async () => {
  const started: string[] = [];
  const ends = new Map<string, () => void>();
  const dispatcher = createDispatcher({
    concurrency: 4,
    orgShare: 1,
    maxWaiting: 1000,
    run(ref) {
      started.push(ref.destinationId);
      const { promise, resolve } = Promise.withResolvers<void>();
      ends.set(ref.destinationId, resolve);
      return promise;
    },
    onError() {},
    onRoom() {},
  });
  const [a, b, c] = ["a", "b", "c"].map((destinationId) => ({
    submittedAt: 1,
    submissionId: "s",
    destinationId,
    orgId: "org",
  }));
  dispatcher.wake([a, b]);
  dispatcher.wake([{ ...b }, { ...a }]);
  assert.deepEqual(started, ["a", "b"]);
  assert.ok(!dispatcher.has(c));
  ends.get("a")!();
  await waitFor(() => !dispatcher.has(a));
  assert.ok(dispatcher.has(b), "its sibling is still known");
  assert.deepEqual(dispatcher.backlog("org"), { total: 1, org: 1 });
  dispatcher.wake([c, a]);
  assert.deepEqual(started, ["a", "b", "c", "a"], "a job that ended may be woken again");
  for (const id of ["a", "b", "c"]) ends.get(id)!();
  await waitFor(() => dispatcher.backlog("org").total === 0);
  assert.ok(![a, b, c].some((ref) => dispatcher.has(ref)));
  await dispatcher.close();
});

Deno.test("a released slot goes to the next job while the first still records", async () => {
  const h = harness({ concurrency: 1 });
  const [first, second] = jobs("a", 2);
  h.dispatcher.wake([first, { ...second, destinationId: "b" }]);
  assert.equal(h.started.length, 1);
  h.release(first.submissionId);
  assert.equal(h.started.length, 2);
  assert.deepEqual(h.dispatcher.stats(), { active: 1, waiting: 0 });
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("a burst holds back its organization's deliveries for the pause, then all may run", async () => {
  let burst: number | null = 0;
  const h = harness({ burstMs: (orgId) => orgId === "X" ? burst : null });
  h.dispatcher.wake([...jobs("x1", 3, "X"), ...jobs("x2", 3, "X")]);
  assert.equal(h.started.length, 0, "the first BURST_PAUSE_MS hold X's deliveries back");
  h.dispatcher.wake(jobs("y", 1, "Y"));
  assert.deepEqual(h.started.map((ref) => ref.orgId), ["Y"], "another organization's run");
  await h.end(h.started[0].submissionId);
  // A flood that outlasts the pause delivers with every slot, not a trickle.
  burst = BURST_PAUSE_MS;
  await waitFor(() => h.started.length === 5, { message: "the recheck started X's jobs" });
  assert.deepEqual(h.dispatcher.stats(), { active: 4, waiting: 2 });
  await h.drain();
  assert.equal(h.started.length, 7);
  await h.dispatcher.close();
});

Deno.test("near its backlog's pause limit a burst no longer holds its organization's deliveries back, and each job leaving is told", async () => {
  let left = 0;
  let burst: number | null = 0;
  const h = harness({ burstMs: () => burst, pauseBelow: 5, onLeft: () => left++ });
  h.dispatcher.wake(jobs("x1", 4, "X"));
  assert.equal(h.started.length, 0, "4 waiting: under the limit, the burst holds them back");
  h.dispatcher.wake(jobs("x2", 1, "X"));
  // 2 slots of 4 for a destination (half its organization's): x1 takes 2, x2 1.
  assert.equal(h.started.length, 3, "5 waiting: the limit reached, deliveries run");
  await h.end(h.started[0].submissionId);
  assert.equal(left, 1);
  burst = null;
  await h.drain();
  assert.equal(h.started.length, 5);
  assert.equal(left, 5);
  await h.dispatcher.close();
});

Deno.test("backlog counts the jobs waiting or in progress, in all and per organization", async () => {
  const h = harness({ concurrency: 1 });
  h.dispatcher.wake([...jobs("a", 3, "A"), ...jobs("b", 2, "B")]);
  assert.deepEqual(h.dispatcher.backlog("A"), { total: 5, org: 3 });
  assert.deepEqual(h.dispatcher.backlog("C"), { total: 5, org: 0 });
  h.release(h.started[0].submissionId);
  assert.deepEqual(h.dispatcher.backlog("A"), { total: 5, org: 3 }, "recording still counts");
  await h.end(h.started[0].submissionId);
  assert.deepEqual(h.dispatcher.backlog("A"), { total: 4, org: 2 });
  await h.drain();
  assert.deepEqual(h.dispatcher.backlog("A"), { total: 0, org: 0 });
  await h.dispatcher.close();
});

Deno.test("a full waiting list turns jobs away and asks for a sweep once it has room", async () => {
  const h = harness({ concurrency: 1, maxWaiting: 4 });
  h.dispatcher.wake(jobs("a", 10));
  assert.deepEqual(h.dispatcher.stats(), { active: 1, waiting: 3 }, "4 taken in, 6 turned away");
  assert.equal(h.rooms(), 0);
  await h.end(h.started[0].submissionId);
  await h.end(h.started[1].submissionId);
  assert.equal(h.rooms(), 1, "below half full: room again");
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("full() says whether the waiting list is full", async () => {
  const h = harness({ maxWaiting: 2, concurrency: 1 });
  h.dispatcher.wake(jobs("a", 2));
  assert.equal(h.dispatcher.full(), false);
  h.dispatcher.wake(jobs("a", 5));
  assert.deepEqual(h.dispatcher.stats(), { active: 1, waiting: 2 });
  assert.equal(h.dispatcher.full(), true);
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("a run that rejects is reported and frees its slot", async () => {
  const h = harness({
    concurrency: 1,
    run: () => Promise.reject(new Error("boom")),
  });
  h.dispatcher.wake(jobs("a", 2));
  await waitFor(() => h.errors.length === 2);
  assert.deepEqual(h.dispatcher.stats(), { active: 0, waiting: 0 });
  await h.dispatcher.close();
});

Deno.test("close starts nothing more and waits for the runs under way", async () => {
  const h = harness({ concurrency: 1 });
  h.dispatcher.wake(jobs("a", 2));
  let closed = false;
  const closing = h.dispatcher.close().then(() => closed = true);
  await Promise.resolve();
  assert.equal(closed, false);
  await h.end(h.started[0].submissionId);
  await closing;
  assert.equal(h.started.length, 1, "the waiting job was not started");
});

Deno.test("an organization holds at most its share of the slots; another gets the rest at once", async () => {
  // The scenario: tenant X has two hanging destinations and 40 submissions.
  const h = harness({ concurrency: 32, orgShare: 0.5 });
  const x = [...jobs("x1", 40, "X"), ...jobs("x2", 40, "X")];
  h.dispatcher.wake(x);
  assert.equal(h.started.length, 16, "X holds half of 32 slots, each destination half of that");
  assert.deepEqual(
    destinationsOf(h.started).toSorted(),
    [...Array(8).fill("x1"), ...Array(8).fill("x2")],
    "shared between X's destinations",
  );
  h.dispatcher.wake(jobs("y", 3, "Y"));
  assert.deepEqual(destinationsOf(h.started.slice(16)), ["y", "y", "y"], "Y starts at once");
  // X's freed slots stay X's: it is still at its share.
  await h.end(h.started[0].submissionId);
  assert.equal(h.started.at(-1)!.orgId, "X");
  assert.deepEqual(h.dispatcher.stats(), { active: 19, waiting: 63 });
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("freed slots rotate between organizations instead of going back to the first", async () => {
  const h = harness({ concurrency: 2, orgShare: 1 });
  h.dispatcher.wake([...jobs("a", 3, "A"), ...jobs("b", 3, "B"), ...jobs("c", 3, "C")]);
  assert.deepEqual(h.started.map((ref) => ref.orgId), ["A", "B"]);
  await h.end(h.started[0].submissionId);
  assert.deepEqual(h.started.map((ref) => ref.orgId), ["A", "B", "C"], "C's turn, not A's again");
  await h.end(h.started[1].submissionId);
  assert.deepEqual(h.started.map((ref) => ref.orgId), ["A", "B", "C", "A"]);
  await h.end(h.started[2].submissionId);
  assert.equal(h.started.at(-1)!.orgId, "B");
  await h.drain();
  assert.equal(h.started.length, 9);
  await h.dispatcher.close();
});

Deno.test("within an organization, freed slots rotate between its destinations", async () => {
  const h = harness({ concurrency: 1, orgShare: 1 });
  h.dispatcher.wake([...jobs("d1", 2), ...jobs("d2", 2), ...jobs("d3", 2)]);
  for (let i = 0; i < 5; i++) await h.end(h.started[i].submissionId);
  assert.deepEqual(destinationsOf(h.started), ["d1", "d2", "d3", "d1", "d2", "d3"]);
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("a destination holds at most half of its organization's share", async () => {
  const h = harness({ concurrency: 16, orgShare: 0.5 });
  h.dispatcher.wake(jobs("hanging", 20));
  assert.equal(h.started.length, 4, "half of the organization's 8 slots");
  h.dispatcher.wake(jobs("other", 20));
  assert.equal(h.started.length, 8, "the organization's other destination gets the rest");
  h.dispatcher.wake(jobs("third", 20));
  assert.equal(h.started.length, 8, "and the organization no more than its share");
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("an organization always gets one slot, however small its share", async () => {
  const h = harness({ concurrency: 2, orgShare: 0.1 });
  h.dispatcher.wake([...jobs("a", 3, "A"), ...jobs("b", 3, "B")]);
  assert.deepEqual(h.started.map((ref) => ref.orgId), ["A", "B"]);
  await h.drain();
  await h.dispatcher.close();
});

Deno.test("jobs still recording their results hold new starts back, however many slots are free", async () => {
  const h = harness({ concurrency: 1000, orgShare: 1 });
  // One job per destination, so that nothing but the slots and the recording bound count.
  const first = Array.from({ length: MAX_RECORDING + 6 }, (_, i) => jobs(`d${i}`, 1)[0]);
  h.dispatcher.wake(first);
  assert.equal(h.started.length, first.length);
  for (const ref of first) h.release(ref.submissionId);
  h.dispatcher.wake(jobs("late", 3));
  assert.equal(h.started.length, first.length, "past MAX_RECORDING recording, nothing starts");
  for (const ref of first.slice(0, 6)) await h.end(ref.submissionId);
  assert.equal(h.started.length, first.length, "at the bound still");
  await h.end(first[6].submissionId);
  assert.equal(h.started.length, first.length + 3, "below it, the slots are free again");
  await h.drain();
  await h.dispatcher.close();
});
