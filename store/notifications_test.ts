import assert from "node:assert/strict";
import { createDb, type Db } from "./db.ts";
import { notifySettingsKey } from "./keys.ts";
import {
  defaultSettings,
  dueEvents,
  getNotificationSettings,
  putNotificationSettings,
  recordEvent,
} from "./notifications.ts";
import {
  claimNotice,
  dispatchEvent,
  finishNotice,
  listDueNotices,
  orgNoticeKeys,
  queueTest,
  retryNotice,
} from "./notice_jobs.ts";
import { createSealer } from "./sealing.ts";

const HOUR = 3_600_000;

async function withDb(run: (db: Db) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  try {
    await run(createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32)))));
  } finally {
    kv.close();
  }
}

const failed = (submissionId: string) => ({
  orgId: "org",
  type: "message.attempt.exhausted" as const,
  subject: "dest",
  destinationId: "dest",
  formId: "form",
  submissionIds: [submissionId],
  detail: "HTTP 500",
});

Deno.test("events group per type and subject: the first due at once, the rest when the hour since the last one told ends", async () => {
  await withDb(async (db) => {
    const t0 = 1_000_000;
    await recordEvent(db, failed("s1"), { now: t0, groupMs: HOUR });
    const [first] = await dueEvents(db, { now: t0, limit: 10 });
    assert.equal(first.value.dueAt, t0);
    const jobs = await dispatchEvent(db, first, {
      channels: [{ kind: "webhook" }],
      now: t0,
      groupMs: HOUR,
    });
    assert.equal(jobs?.length, 1);
    // Another process that read the same entry finds it gone: one dispatch only.
    assert.equal(
      await dispatchEvent(db, first, { channels: [{ kind: "webhook" }], now: t0, groupMs: HOUR }),
      null,
    );

    await recordEvent(db, failed("s2"), { now: t0 + 1000, groupMs: HOUR });
    await recordEvent(db, failed("s3"), { now: t0 + 2000, groupMs: HOUR });
    assert.deepEqual(await dueEvents(db, { now: t0 + 2000, limit: 10 }), []);
    const [grouped] = await dueEvents(db, { now: t0 + HOUR, limit: 10 });
    assert.equal(grouped.value.count, 2);
    assert.deepEqual(grouped.value.submissionIds, ["s2", "s3"]);
    assert.equal(grouped.value.dueAt, t0 + HOUR);
  });
});

Deno.test("settings are sealed in KV and read back", async () => {
  await withDb(async (db) => {
    const settings = {
      ...defaultSettings("off"),
      webhook: { url: "https://ops.example.com/PATHSECRET", secret: null },
    };
    await putNotificationSettings(db, "org", settings);
    const raw = await db.kv.get<Uint8Array>(notifySettingsKey("org"));
    assert.ok(!new TextDecoder().decode(raw.value!).includes("PATHSECRET"));
    assert.deepEqual(await getNotificationSettings(db, "org"), settings);
    assert.equal(await getNotificationSettings(db, "other"), null);
  });
});

Deno.test("notice jobs are found through their due entries: a lease moves them, a retry too, the end removes them", async () => {
  await withDb(async (db) => {
    const t0 = 5_000_000;
    const [ref] = await queueTest(db, { orgId: "org", channels: [{ kind: "webhook" }], now: t0 });
    assert.deepEqual(await listDueNotices(db, { now: t0 - 1, limit: 10 }), [], "not due before");
    assert.deepEqual(await listDueNotices(db, { now: t0, limit: 10 }), [ref]);
    assert.equal(ref.channel, "webhook");

    const claimed = await claimNotice(db, ref, { now: t0, leaseMs: 1000 });
    assert.ok(claimed);
    assert.equal(claimed.job.attempts, 1);
    assert.equal(await claimNotice(db, ref, { now: t0, leaseMs: 1000 }), null, "leased once");
    assert.deepEqual(await listDueNotices(db, { now: t0 + 999, limit: 10 }), []);
    assert.deepEqual(await listDueNotices(db, { now: t0 + 1000, limit: 10 }), [ref], "lease ends");

    await retryNotice(db, claimed, { dueAt: t0 + 5000 });
    assert.deepEqual(await listDueNotices(db, { now: t0 + 4999, limit: 10 }), []);
    const again = await claimNotice(db, ref, { now: t0 + 5000, leaseMs: 1000 });
    assert.equal(again?.job.attempts, 2);
    await finishNotice(db, again!, { delivered: true, error: null, now: t0 + 5000 });
    assert.deepEqual(await listDueNotices(db, { now: Number.MAX_SAFE_INTEGER, limit: 10 }), []);
    assert.equal(await claimNotice(db, ref, { now: t0 + 9000, leaseMs: 1000 }), null, "ended");
  });
});

Deno.test("an organization's waiting notifications are found by its id, due entries included", async () => {
  await withDb(async (db) => {
    const t0 = 7_000_000;
    await recordEvent(db, failed("s1"), { now: t0, groupMs: HOUR });
    await queueTest(db, { orgId: "org", channels: [{ kind: "webhook" }], now: t0 });
    await queueTest(db, { orgId: "other", channels: [{ kind: "email" }], now: t0 });
    const keys = await orgNoticeKeys(db, "org");
    for (const key of keys) await db.kv.delete(key);
    const left: string[] = [];
    for await (const entry of db.kv.list({ prefix: [] })) left.push(JSON.stringify(entry.key));
    assert.equal(keys.length, 4);
    assert.ok(left.every((key) => !key.includes('"org"')), left.join("\n"));
    assert.ok(left.some((key) => key.includes('"other"')), "another organization's are kept");
  });
});
