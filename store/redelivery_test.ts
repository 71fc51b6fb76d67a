import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import { claimJob, rescheduleJob } from "./jobs.ts";
import { jobsByDestinationPrefix } from "./keys.ts";
import { parseDeliveryId, redeliver } from "./redelivery.ts";
import { createSealer } from "./sealing.ts";
import { sendNow } from "./send_now.ts";
import { submissionIdAt } from "./submission_id.ts";
import { createSubmissionWriter } from "./submissions.ts";

Deno.test("parseDeliveryId reads <submissionId>.<destinationId> and nothing else", () => {
  const submissionId = crypto.randomUUID();
  const destinationId = crypto.randomUUID();
  assert.deepEqual(parseDeliveryId(`${submissionId}.${destinationId}`), {
    submissionId,
    destinationId,
  });
  for (
    const bad of [
      submissionId,
      `${submissionId}.`,
      `${submissionId}/${destinationId}`,
      `${submissionId}.${destinationId}.x`,
      `x${submissionId}.${destinationId}`,
      "",
    ]
  ) {
    assert.equal(parseDeliveryId(bad), null, bad);
  }
});

/** A KV that counts what it reads: keys read by get/getMany and entries a list yielded. */
function countingKv(kv: Deno.Kv) {
  const counts = { read: 0 };
  const counting = new Proxy(kv, {
    get(target, name) {
      if (name === "get") {
        return (key: Deno.KvKey) => {
          counts.read++;
          return target.get(key);
        };
      }
      if (name === "getMany") {
        return (keys: Deno.KvKey[]) => {
          counts.read += keys.length;
          return target.getMany(keys);
        };
      }
      if (name === "list") {
        return async function* (selector: Deno.KvListSelector, options?: Deno.KvListOptions) {
          for await (const entry of target.list(selector, options)) {
            counts.read++;
            yield entry;
          }
        };
      }
      const value = Reflect.get(target, name, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { counting, counts };
}

Deno.test("resume and redelivery read their destination's jobs only: flat as other tenants' jobs grow tenfold", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const writer = createSubmissionWriter(db);
    const ours = { formId: crypto.randomUUID(), orgId: "ours", destinationId: crypto.randomUUID() };
    const theirs = { formId: crypto.randomUUID(), orgId: "theirs" };
    const theirDestinations = [crypto.randomUUID(), crypto.randomUUID()];
    const submit = (s: { formId: string; orgId: string }, ids: string[], held: boolean) =>
      writer.write({
        submissionId: submissionIdAt(Date.now()),
        formId: s.formId,
        orgId: s.orgId,
        sealedEnvelope: new Uint8Array(64),
        destinations: ids.map((id) => ({ id, type: "webhook" as const, held })),
        submittedAt: Date.now(),
        envelopeTtlMs: 3_600_000,
      });
    for (let i = 0; i < 3; i++) await submit(ours, [ours.destinationId], true);
    const { counting, counts } = countingKv(kv);
    const measured = { ...db, kv: counting };

    /** KV reads of a by-name redelivery (found under way), a since redelivery and a resume. */
    const readsOfCalls = async () => {
      const reads: number[] = [];
      for (
        const selection of [
          { submissionId: submissionIdAt(Date.now()) }, // unknown: nothing to find
          { since: 0 },
          { since: 0, heldOnly: true },
        ]
      ) {
        counts.read = 0;
        await redeliver(measured, {
          formId: ours.formId,
          destinationId: ours.destinationId,
          now: Date.now(),
          ...selection,
        });
        reads.push(counts.read);
      }
      return reads;
    };

    for (let i = 0; i < 50; i++) await submit(theirs, theirDestinations, false);
    const before = await readsOfCalls();
    for (let i = 0; i < 450; i++) await submit(theirs, theirDestinations, false);
    const after = await readsOfCalls();
    assert.deepEqual(
      after,
      before,
      "reads per call with 100 and with 1 000 jobs of another tenant",
    );
    // By name (unknown): its job's key and its retained record's, read by key; since and
    // resume: our 3 index entries and 3 jobs (and no retained ones).
    assert.deepEqual(before, [2, 6, 6]);
  } finally {
    kv.close();
  }
});

Deno.test("a job joins its destination's index when first put back; by name it is read by its key", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32))));
    const submittedAt = Date.now();
    const submissionId = submissionIdAt(submittedAt);
    const [active, paused] = [crypto.randomUUID(), crypto.randomUUID()];
    const formId = crypto.randomUUID();
    await createSubmissionWriter(db).write({
      submissionId,
      formId,
      orgId: "o",
      sealedEnvelope: new Uint8Array(64),
      destinations: [{ id: active, type: "webhook" }, { id: paused, type: "webhook", held: true }],
      submittedAt,
      envelopeTtlMs: 3_600_000,
    });
    const indexed = async (destinationId: string) => {
      let n = 0;
      for await (const _ of kv.list({ prefix: jobsByDestinationPrefix(destinationId) })) n++;
      return n;
    };
    assert.equal(await indexed(active), 0, "a pending job is stored without an index entry");
    assert.equal(await indexed(paused), 1, "a held job is stored with one");

    // Not yet attempted: by name it is found by its key, under way, with two reads (job, retained).
    const { counting, counts } = countingKv(kv);
    const measured = { ...db, kv: counting };
    const byName = { formId, destinationId: active, submissionId, now: Date.now() };
    assert.deepEqual(await redeliver(measured, byName), { woken: [], underWay: 1, expired: 0 });
    assert.equal(counts.read, 2);
    counts.read = 0;
    assert.deepEqual(await sendNow(measured, byName), {
      sent: { submittedAt, submissionId, destinationId: active, orgId: "o" },
    });
    assert.equal(counts.read, 1, "send-now reads the one job, no scan");
    assert.deepEqual(await sendNow(db, { ...byName, formId: crypto.randomUUID() }), {
      state: "not_waiting",
    }, "another form's delivery is not found");

    // Held on its first attempt (its destination was paused meanwhile): now in the index,
    // so resuming the destination finds it.
    const claimed = await claimJob(db, { submittedAt, submissionId, destinationId: active }, {
      now: Date.now(),
      leaseMs: 60_000,
    });
    assert.ok(claimed);
    const held = { ...claimed.job, state: "held" as const, dueAt: Date.now() + 3_600_000 };
    assert.ok(await rescheduleJob(db, claimed, held, { wakeUp: null }));
    assert.equal(await indexed(active), 1);
    const resumed = await redeliver(db, {
      formId,
      destinationId: active,
      since: 0,
      heldOnly: true,
      now: Date.now(),
    });
    assert.deepEqual(resumed.woken.map((ref) => ref.submissionId), [submissionId]);
  } finally {
    kv.close();
  }
});
