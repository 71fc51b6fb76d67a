import assert from "node:assert/strict";
import type { JobRecord, KnownJob } from "../store/job_record.ts";
import { createClaimHints } from "./claim_hints.ts";

/** The known jobs of a submission to `destinations`, and its envelope, counted as `bytes`. */
function storedSubmission(id: string, destinations: string[], bytes = 100) {
  const family = destinations;
  const jobs: KnownJob[] = destinations.map((destinationId, i) => ({
    job: {
      submissionId: id,
      destinationId,
      formId: "f1",
      orgId: "o1",
      type: i === 0 ? "webhook" : "smtp",
      state: "pending",
      attempts: 0,
      dueAt: 1,
      chunks: 1,
      family,
      lastError: null,
      lastStatusCode: null,
      submittedAt: 1,
      updatedAt: 1,
    } satisfies JobRecord,
    versionstamp: "00000000000000010000",
  }));
  return { jobs, submission: { envelopeJson: "x".repeat(bytes / 2) } };
}

const ref = (submissionId: string, destinationId: string) => ({
  submittedAt: 1,
  submissionId,
  destinationId,
});

Deno.test("a hint is taken once, with its job as stored and the envelope", () => {
  const hints = createClaimHints({ maxHints: 10, maxBytes: 10_000 });
  const { jobs, submission } = storedSubmission("s1", ["d1", "d2"]);
  hints.remember(jobs, submission, 0);
  assert.deepEqual(hints.stats(), { hints: 2, bytes: 100 }, "the envelope counted once");
  assert.equal(hints.versionstampOf(ref("s1", "d2")), jobs[1].versionstamp);
  const hint = hints.take(ref("s1", "d2"));
  assert.deepEqual(hint?.known, jobs[1], "the job rebuilt as it was stored");
  assert.equal(hint?.envelopeJson, submission.envelopeJson);
  assert.equal(hints.take(ref("s1", "d2")), undefined);
  assert.equal(hints.versionstampOf(ref("s1", "d2")), undefined);
  assert.deepEqual(hints.stats(), { hints: 1, bytes: 100 });
  assert.deepEqual(hints.take(ref("s1", "d1"))?.known, jobs[0]);
  assert.deepEqual(hints.stats(), { hints: 0, bytes: 0 });
});

Deno.test("no hint for a job behind a line as long as the bound: it would be dropped first", () => {
  const hints = createClaimHints({ maxHints: 3, maxBytes: 10_000 });
  const { jobs, submission } = storedSubmission("s1", ["d1", "d2"]);
  hints.remember(jobs, submission, 2);
  assert.deepEqual(hints.stats(), { hints: 1, bytes: 100 });
  assert.ok(hints.take(ref("s1", "d1")));
  assert.equal(hints.take(ref("s1", "d2")), undefined);
});

Deno.test("hints start afresh when their number or their bytes would pass the bound", () => {
  const hints = createClaimHints({ maxHints: 4, maxBytes: 1_000 });
  hints.remember(storedSubmission("s1", ["d1", "d2"]).jobs, { envelopeJson: "x".repeat(300) }, 0);
  hints.remember(storedSubmission("s2", ["d1"]).jobs, { envelopeJson: "x".repeat(300) }, 0);
  assert.deepEqual(hints.stats(), { hints: 1, bytes: 600 }, "1 200 bytes would pass 1 000");
  assert.equal(hints.take(ref("s1", "d1")), undefined);
  const more = storedSubmission("s3", ["d1", "d2", "d3", "d4"], 10);
  hints.remember(more.jobs, more.submission, 0);
  assert.deepEqual(hints.stats(), { hints: 4, bytes: 10 }, "five jobs would pass four");
  assert.equal(hints.take(ref("s2", "d1")), undefined);
  assert.ok(hints.take(ref("s3", "d4")));
});

Deno.test("an envelope larger than the byte bound gets no hint", () => {
  const hints = createClaimHints({ maxHints: 10, maxBytes: 1_000 });
  const { jobs, submission } = storedSubmission("s1", ["d1"], 2_000);
  hints.remember(jobs, submission, 0);
  assert.deepEqual(hints.stats(), { hints: 0, bytes: 0 });
});
