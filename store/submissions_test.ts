import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import { createSealer } from "./sealing.ts";
import { createSubmissionWriter, type NewSubmission, PageTokenUsedError } from "./submissions.ts";

function submission(pageToken: string): NewSubmission {
  return {
    submissionId: crypto.randomUUID(),
    formId: "form_1",
    orgId: "org_1",
    sealedEnvelope: new Uint8Array(100),
    destinations: [{ id: "dest_1", type: "webhook" }],
    submittedAt: Date.now(),
    envelopeTtlMs: 3_600_000,
    pageToken,
  };
}

Deno.test("a page token is recorded with its submission and good once, across processes sharing the KV file", async () => {
  const dir = await Deno.makeTempDir();
  const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
  // Two processes: two KV handles on one file, each with its own group commit.
  const kvs = [await Deno.openKv(`${dir}/kv`), await Deno.openKv(`${dir}/kv`)];
  try {
    const writers = kvs.map((kv) => createSubmissionWriter(createDb(kv, sealer)));
    // Ten uses of one token at once, five through each process (merged commits included).
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) => writers[i % 2].write(submission("sig-one"))),
    );
    const stored = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r) =>
      r.status === "rejected" && r.reason instanceof PageTokenUsedError
    );
    assert.equal(stored.length, 1, "one accepted");
    assert.equal(refused.length, 9, "the others refused as used");
    // Another token is unaffected.
    await writers[1].write(submission("sig-two"));
    await assert.rejects(writers[0].write(submission("sig-two")), PageTokenUsedError);
  } finally {
    for (const kv of kvs) kv.close();
    await Deno.remove(dir, { recursive: true });
  }
});
