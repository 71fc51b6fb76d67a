import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import { openEnvelopeData, readEnvelopeData, sealEnvelope } from "./envelope.ts";
import type { JobRecord } from "./job_record.ts";
import { createSealer, type Sealer } from "./sealing.ts";
import type { SubmissionEnvelope } from "../submission.ts";

const envelope: SubmissionEnvelope = {
  submissionId: "0194f7a0-0000-7000-8000-000000000001",
  formId: "f1",
  formName: "Contact",
  payload: { name: "Ada", message: "héllo" },
  metadata: { origin: null, ip: null, userAgent: null, referer: null, submittedAt: "" },
};

const job = {
  submissionId: envelope.submissionId,
  submittedAt: 1,
  chunks: 2,
} as JobRecord;

Deno.test("sealing hands back the JSON it sealed, which opens to the same envelope", async () => {
  const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
  const { sealed, json } = await sealEnvelope(sealer, envelope);
  assert.deepEqual(JSON.parse(json), envelope);
  assert.ok(!new TextDecoder().decode(sealed).includes("Ada"), "KV gets it sealed");
  assert.deepEqual(await openEnvelopeData(sealer, envelope.submissionId, sealed), envelope);
});

Deno.test("an envelope this process stored is neither read nor opened", async () => {
  const kv = await Deno.openKv(":memory:");
  kv.close();
  // A closed KV and a sealer that cannot open: a read or an open would throw.
  const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
  const refusing: Sealer = {
    ...sealer,
    open: () => Promise.reject(new Error("opened")),
  };
  const db = createDb(kv, refusing);
  const json = JSON.stringify(envelope);
  const data = await readEnvelopeData(db, { job, versionstamp: "", envelope: json });
  assert.equal(data, json);
  assert.deepEqual(await openEnvelopeData(refusing, envelope.submissionId, data!), envelope);
  // The same job claimed with a read of two chunks does read them, and finds them gone.
  const chunk = new Uint8Array(8);
  await assert.rejects(readEnvelopeData(db, { job, versionstamp: "", envelope: chunk }));
});
