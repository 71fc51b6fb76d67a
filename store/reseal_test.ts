import assert from "node:assert/strict";
import { createDb, type Db } from "./db.ts";
import { addDestination, getDestination } from "./destinations.ts";
import { openEnvelope, readEnvelopeData, sealEnvelope } from "./envelope.ts";
import { createForm, getFormById, openCaptchaSecret } from "./forms.ts";
import { claimJob } from "./jobs.ts";
import { destinationKey, envelopeChunkKey } from "./keys.ts";
import { getNotificationSettings, putNotificationSettings } from "./notifications.ts";
import { resealAll } from "./reseal.ts";
import { createSealer, keyIdOf, type Sealer } from "./sealing.ts";
import { submissionIdAt } from "./submission_id.ts";
import { createSubmissionWriter } from "./submissions.ts";
import type { SubmissionEnvelope } from "../submission.ts";

const OLD = crypto.getRandomValues(new Uint8Array(32));
const NEW = crypto.getRandomValues(new Uint8Array(32));
const LIFETIME = 3_600_000;

/** One of each sealed family under `db`'s key; the envelope spans three chunks. */
async function fill(db: Db) {
  const form = await createForm(db, "org1", {
    name: "Contact",
    allowedOrigins: [],
    verifyCaptcha: true,
    captchaSecret: "captcha-secret",
    enabled: true,
    honeypotField: null,
    redirectUrl: null,
  });
  const destination = await addDestination(db, form, {
    type: "webhook",
    config: { url: "https://example.test/hook/secret-path" },
    isEnabled: true,
  });
  await putNotificationSettings(db, "org1", {
    email: { to: ["owner@example.test"], via: "platform" },
    chat: [],
    webhook: null,
    events: [],
    summary: "off",
  });
  const submittedAt = Date.now();
  const envelope: SubmissionEnvelope = {
    submissionId: submissionIdAt(submittedAt),
    formId: form.id,
    formName: form.name,
    payload: { message: "x".repeat(130_000) },
    metadata: { origin: null, ip: null, userAgent: null, referer: null, submittedAt: "" },
  };
  const stored = await createSubmissionWriter(db).write({
    submissionId: envelope.submissionId,
    formId: form.id,
    orgId: "org1",
    sealedEnvelope: (await sealEnvelope(db.sealer, envelope)).sealed,
    destinations: [{ id: destination!.id, type: "webhook" }],
    submittedAt,
    envelopeTtlMs: LIFETIME,
  });
  const ref = { submittedAt, submissionId: envelope.submissionId, destinationId: destination!.id };
  return { form, destination: destination!, envelope, stored, ref };
}

Deno.test("reseal rewrites every sealed family under the current key, and then no earlier key is needed", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const before = createDb(kv, await createSealer(OLD));
    const { form, destination, envelope, ref } = await fill(before);
    const ring = createDb(kv, await createSealer(NEW, [OLD]));
    const options = { envelopeLifetimeMs: LIFETIME };

    const counted = await resealAll(ring, { ...options, reseal: false });
    assert.deepEqual(counted.byKey, { [keyIdOf(OLD)]: 4 }, "4 values under the old key");
    const report = await resealAll(ring, { ...options, reseal: true });
    assert.deepEqual(report.resealed, {
      destinations: 1,
      forms: 1,
      notify_settings: 1,
      envelopes: 1,
    });
    assert.equal(report.skipped, 0);
    const after = await resealAll(ring, { ...options, reseal: false });
    assert.deepEqual(after.byKey, { [keyIdOf(NEW)]: 4 });
    assert.deepEqual(after.unknown, {});

    // Everything opens with the new key alone: the old one is no longer needed.
    const only = createDb(kv, await createSealer(NEW));
    assert.deepEqual((await getDestination(only, form.id, destination.id))?.config, {
      url: "https://example.test/hook/secret-path",
    });
    assert.equal(
      await openCaptchaSecret(only, (await getFormById(only, form.id))!),
      "captcha-secret",
    );
    assert.deepEqual((await getNotificationSettings(only, "org1"))?.email?.to, [
      "owner@example.test",
    ]);
    const claimed = await claimJob(only, ref, {
      now: Date.now(),
      leaseMs: 60_000,
    });
    assert.ok(claimed);
    assert.equal(claimed.job.chunks, 3, "the chunk count the job names is kept");
    const sealed = await readEnvelopeData(only, claimed);
    assert.ok(sealed instanceof Uint8Array);
    const opened = await openEnvelope(only.sealer, envelope.submissionId, sealed);
    assert.equal((opened.payload as { message: string }).message.length, 130_000);
    // A second reseal has nothing left to do.
    const again = await resealAll(ring, { ...options, reseal: true });
    assert.equal(Object.values(again.resealed).reduce((a, b) => a + b), 0);
  } finally {
    kv.close();
  }
});

Deno.test("reseal leaves a value changed meanwhile as written, and counts keys it lacks", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const before = createDb(kv, await createSealer(OLD));
    const { form, destination } = await fill(before);
    const ring = await createSealer(NEW, [OLD]);
    let changedOnce = false;
    // A writer (a tenant's edit in another process) commits between reseal's read and commit.
    const racing: Sealer = {
      ...ring,
      async seal(plaintext, context) {
        if (!changedOnce && context === `destination:${destination.id}`) {
          changedOnce = true;
          const entry = await kv.get<Record<string, unknown>>(
            destinationKey(form.id, destination.id),
          );
          const edited = await before.sealer.seal(
            new TextEncoder().encode(JSON.stringify({ url: "https://example.test/edited" })),
            context,
          );
          await kv.set(entry.key, { ...entry.value, sealedConfig: edited.toBase64() });
        }
        return await ring.seal(plaintext, context);
      },
    };
    const report = await resealAll(createDb(kv, racing), {
      reseal: true,
      envelopeLifetimeMs: LIFETIME,
    });
    assert.equal(report.skipped, 1);
    assert.equal(report.resealed.destinations, 0);
    assert.equal(report.resealed.envelopes, 1);
    const ringDb = createDb(kv, ring);
    assert.deepEqual((await getDestination(ringDb, form.id, destination.id))?.config, {
      url: "https://example.test/edited",
    }, "the edit is kept, not overwritten by the reseal");
    const after = await resealAll(ringDb, { reseal: false, envelopeLifetimeMs: LIFETIME });
    assert.deepEqual(after.byKey, { [keyIdOf(NEW)]: 3, [keyIdOf(OLD)]: 1 });

    // A ring without the old key: what is under it is counted as unknown, nothing thrown.
    const lacking = createDb(kv, await createSealer(NEW));
    const unknown = await resealAll(lacking, { reseal: true, envelopeLifetimeMs: LIFETIME });
    assert.deepEqual(unknown.unknown, { [keyIdOf(OLD)]: 1 });
    assert.equal(Object.values(unknown.resealed).reduce((a, b) => a + b), 0);
  } finally {
    kv.close();
  }
});

Deno.test("a longer envelope read while it is resealed comes from one commit", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const before = createDb(kv, await createSealer(OLD));
    const { envelope, ref } = await fill(before);
    const ring = createDb(kv, await createSealer(NEW, [OLD]));
    const claimed = await claimJob(ring, ref, {
      now: Date.now(),
      leaseMs: 60_000,
    });
    assert.ok(claimed?.envelope, "the claim brought chunk 0 as sealed under the old key");
    await resealAll(ring, { reseal: true, envelopeLifetimeMs: LIFETIME });
    const first = await kv.get<Uint8Array>(
      envelopeChunkKey(ref.submittedAt, envelope.submissionId, 0),
    );
    assert.notDeepEqual(first.value, claimed.envelope, "chunk 0 was rewritten since the claim");
    const sealed = await readEnvelopeData(ring, claimed);
    assert.ok(sealed instanceof Uint8Array);
    assert.equal(
      (await openEnvelope(ring.sealer, envelope.submissionId, sealed)).submissionId,
      envelope.submissionId,
    );
  } finally {
    kv.close();
  }
});
