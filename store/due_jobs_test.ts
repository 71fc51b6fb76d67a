import assert from "node:assert/strict";
import { waitFor } from "../tests/helpers/wait.ts";
import { createDb } from "./db.ts";
import { listenForWakes } from "./due_jobs.ts";
import type { JobRef } from "./job_record.ts";
import { createSealer } from "./sealing.ts";
import { wakeMessage } from "./wake.ts";

const ref = (submissionId: string): JobRef => ({
  submittedAt: Date.now(),
  submissionId,
  destinationId: "d",
  orgId: "o",
});

Deno.test("the queue listener passes over the wake-ups of jobs a process woke itself, its own or another's, and reads every other", async () => {
  const kv = await Deno.openKv(":memory:");
  // Every message the queue hands over, read or passed over.
  let received = 0;
  const counting = new Proxy(kv, {
    get(target, property) {
      if (property === "listenQueue") {
        return (handler: (message: unknown) => void) =>
          target.listenQueue((message) => {
            received++;
            return handler(message);
          });
      }
      const value = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const db = createDb(counting, await createSealer(new Uint8Array(32)), { queues: true });
  const woken: string[] = [];
  const listening = listenForWakes(db, (refs) => woken.push(...refs().map((r) => r.submissionId)));
  try {
    await db.batcher.commit({
      apply: () => {},
      mutations: 0,
      wake: [ref("here")],
      wokenHere: true,
    });
    await db.batcher.commit({ apply: () => {}, mutations: 0, wake: [ref("not-woken")] });
    await kv.enqueue(wakeMessage([ref("other-process")], "another batcher"));
    await kv.enqueue(wakeMessage([ref("earlier-version")]));
    await waitFor(() => received === 4, { message: () => `${received} messages received` });
    // "other-process" is being delivered by the process that stored it (or, should it stop,
    // is brought in by the sweep).
    assert.deepEqual(woken.sort(), ["earlier-version", "not-woken"]);
  } finally {
    kv.close();
    await listening;
  }
});
