/**
 * Deleting an organization leaves no key naming it, its forms, destinations, keys or
 * submissions, whatever it did before; and nothing is sent for it afterwards, neither by
 * a notifier that was running nor after a restart on the same KV. Deleting a form leaves
 * no key naming it or what it owned, and nothing else of its organization goes; a
 * delivery under way meanwhile writes nothing back when it ends.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../config.ts";
import { startService } from "../service.ts";
import { queueTest } from "../store/notice_jobs.ts";
import { listNotifyLog } from "../store/notifications.ts";
import { createOrg, deleteOrg, getOrg, setOrgDisabled } from "../store/orgs.ts";
import { sha256Hex } from "../store/sealing.ts";
import { pageToken, TIME_TRAP_FIELD } from "../rules/spam.ts";
import { storedJobs, submitAndSettle, webhook } from "./helpers/deliveries.ts";
import { type Harness, startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";
import { countKeys } from "./helpers/kv.ts";
import { createRefusalCounter } from "../store/refusals.ts";

/** Every key of the KV, as JSON-able parts. */
async function allKeys(kv: Deno.Kv): Promise<Deno.KvKey[]> {
  const keys: Deno.KvKey[] = [];
  for await (const entry of kv.list({ prefix: [] })) keys.push(entry.key);
  return keys;
}

/** Keys with a part among `ids`. */
function naming(keys: Deno.KvKey[], ids: Set<string>): Deno.KvKey[] {
  return keys.filter((key) => key.some((part) => typeof part === "string" && ids.has(part)));
}

/**
 * Keys with a part among a deleted form's `ids`, the organization's notices aside (they
 * are the organization's, and are kept).
 */
function leftOfForm(keys: Deno.KvKey[], ids: Set<string>): Deno.KvKey[] {
  return naming(keys, ids).filter((key) => !String(key[0]).startsWith("notify_"));
}

/** What busyOrg needs of the harness: fast retries, kept failures, a count that reaches KV. */
const BUSY_CONFIG = {
  retryScheduleMs: [10, 10],
  failedRetentionMs: 3_600_000,
  // A process alone writes a visitor's count once it reaches half the limit: 4 here.
  rateLimit: { max: 8, windowMs: 600_000 },
};

/**
 * An organization's activity of every kind the service keeps, on one form of its own:
 * returns the ids the form owns (the form, its public key, destinations and
 * submissions), the hashes of the organization's tenant keys, and its key after rotation.
 */
async function busyOrg(h: Harness, tenantKey: string, ops: { url: string }) {
  const admin = (method: string, path: string, body?: unknown) =>
    h.admin(method, path, body, { tenantKey });
  const created = await admin("POST", "/forms", {
    name: "Doomed",
    honeypotField: "_gotcha",
    spamRules: { minSeconds: 3 },
  });
  const { form } = await created.json();
  const ids = new Set<string>([form.id, form.publicKey]);
  // Fails for good every time: outcomes, retained failures, failing records, events.
  await using failing = startWebhookSink(() => new Response("no", { status: 500 }));
  const added = await admin("POST", `/forms/${form.id}/destinations`, webhook(failing.url));
  const destinationId = (await added.json()).destination.id;
  ids.add(destinationId);
  // An email address through a relay that is not there: pending, with its link stored.
  const relay = await admin("POST", `/forms/${form.id}/destinations`, {
    type: "smtp",
    config: {
      host: "127.0.0.1",
      port: 9,
      secureTransport: "off",
      username: "u",
      password: "p",
      from: "f@example.org",
      to: ["t@example.org"],
    },
  });
  const relayId = (await relay.json()).destination.id;
  ids.add(relayId);
  const put = await admin("PUT", "/notifications", {
    email: { to: ["owner@example.org"], via: relayId },
    webhook: { url: ops.url, secret: null },
    summary: "daily",
  });
  assert.equal(put.status, 200);
  await waitFor(async () => {
    const view = await (await admin("GET", "/notifications")).json();
    return view.notifications.email.addresses[0].error !== null;
  }, { message: "the confirmation tried" });
  for (let i = 0; i < 3; i++) {
    const token = pageToken(h.service.db.sealer, form.publicKey, Date.now() - 9000);
    const response = await h.submit(form.publicKey, { i, [TIME_TRAP_FIELD]: token });
    assert.equal(response.status, 202);
    ids.add((await response.json()).submissionId);
  }
  // Refused (the time trap), and a test send, a notification test, a summary.
  assert.equal((await h.submit(form.publicKey, { caught: true })).status, 202);
  const tested = await admin("POST", `/forms/${form.id}/destinations/${destinationId}/test`);
  assert.equal(tested.status, 200);
  assert.equal((await admin("POST", "/notifications/test")).status, 200);
  await h.service.notifier.runOnce();
  await waitFor(
    async () => (await storedJobs(h)).filter((j) => j.formId === form.id).length === 0,
    {
      message: "the doomed form's deliveries final",
    },
  );
  // A rotated key: the old one is kept revoked.
  const rotated = await admin("POST", "/keys/rotate");
  const fresh = (await rotated.json()).tenantKey as string;
  const keyHashes = new Set([await sha256Hex(tenantKey), await sha256Hex(fresh)]);
  // Refusals counted and a refused site noted (written by the counter's flush).
  const refusals = createRefusalCounter(h.service.db);
  refusals.count(form.id, "origin");
  refusals.refusedOrigin(form.id, "https://elsewhere.example");
  await refusals.flush();
  // Still under way when it goes: a submission not yet delivered.
  const late = await h.submit(form.publicKey, {
    late: true,
    [TIME_TRAP_FIELD]: pageToken(h.service.db.sealer, form.publicKey, Date.now() - 9000),
  });
  ids.add((await late.json()).submissionId);
  return { formId: form.id, ofForm: ids, keyHashes, tenantKey: fresh };
}

Deno.test("delete-org leaves no key naming the organization, its forms, destinations, keys or submissions; others keep theirs", async () => {
  await using h = await startHarness(BUSY_CONFIG);
  await using ops = startWebhookSink();
  const doomed = await createOrg(h.service.db, "Doomed org");
  const { ofForm, keyHashes } = await busyOrg(h, doomed.tenantKey, ops);
  const ids = new Set([...ofForm, ...keyHashes, doomed.orgId]);
  // A neighbour that stays.
  await using kept = startWebhookSink();
  const form = await h.createForm();
  await h.addDestination(form.id, webhook(kept.url));
  await submitAndSettle(h, form.publicKey, { name: "stays" });
  assert.equal((await h.admin("PUT", "/notifications", { webhook: { url: ops.url } })).status, 200);

  const before = await allKeys(h.service.db.kv);
  const families = new Set(naming(before, ids).map((key) => String(key[0])));
  const expected = ["notify_settings", "notify_log", "notify_summaries"];
  expected.push("deliveries", "retained", "destination_failing", "page_token_uses", "rate");
  expected.push("tenant_keys", "envelopes", "forms_by_public_key", "refusals", "refused_origins");
  for (const family of expected) {
    assert.ok(families.has(family), `the doomed org has ${family} to delete`);
  }

  // A link's key names only its token's hash: its value names the organization.
  assert.equal(await countKeys(h.service.db.kv, "notify_confirm_tokens"), 1);

  assert.equal(await deleteOrg(h.service.db, doomed.orgId), true);
  assert.equal(await countKeys(h.service.db.kv, "notify_confirm_tokens"), 0);
  const after = await allKeys(h.service.db.kv);
  assert.deepEqual(naming(after, ids), [], "no key names the deleted organization");
  assert.equal(await getOrg(h.service.db, doomed.orgId), null);
  // The neighbour's keys are all there.
  const neighbour = new Set([h.orgId, form.id]);
  assert.deepEqual(naming(after, neighbour), naming(before, neighbour));
  assert.equal(await deleteOrg(h.service.db, doomed.orgId), false);
});

Deno.test("deleting a form leaves no key naming it, its destinations or submissions; its organization and other forms keep theirs", async () => {
  await using h = await startHarness(BUSY_CONFIG);
  await using ops = startWebhookSink();
  const owner = await createOrg(h.service.db, "Owner");
  const { formId, ofForm, keyHashes, tenantKey } = await busyOrg(h, owner.tenantKey, ops);
  const admin = (method: string, path: string, body?: unknown) =>
    h.admin(method, path, body, { tenantKey });
  // The organization's other form, with deliveries of its own.
  await using kept = startWebhookSink();
  const sibling = (await (await admin("POST", "/forms", { name: "Stays" })).json()).form;
  const added = await admin("POST", `/forms/${sibling.id}/destinations`, webhook(kept.url));
  assert.equal(added.status, 200);
  const response = await h.submit(sibling.publicKey, { name: "stays" });
  assert.equal(response.status, 202);
  await waitFor(() => kept.received.length === 1, { message: "the sibling's delivery" });

  const before = await allKeys(h.service.db.kv);
  const families = new Set(naming(before, ofForm).map((key) => String(key[0])));
  const expected = ["deliveries", "retained", "destination_failing", "page_token_uses", "rate"];
  expected.push("envelopes", "forms_by_public_key", "refusals", "refused_origins");
  for (const family of expected) {
    assert.ok(families.has(family), `the form has ${family} to delete`);
  }
  assert.equal((await admin("DELETE", `/forms/${formId}`)).status, 200);

  const after = await allKeys(h.service.db.kv);
  assert.deepEqual(leftOfForm(after, ofForm), [], "no key names the deleted form or what it owned");
  // The organization, its keys and settings, and its other form are all there.
  const stays = new Set([owner.orgId, ...keyHashes, sibling.id, sibling.publicKey]);
  const staying = (keys: Deno.KvKey[]) =>
    naming(keys, stays).filter((key) => naming([key], ofForm).length === 0);
  assert.deepEqual(staying(after), staying(before));
  assert.ok(after.some((key) => key[0] === "notify_settings" && key[1] === owner.orgId));
});

Deno.test("a form deleted while its delivery is in flight: the attempt's end, delivered or failed, writes nothing back", async () => {
  for (const status of [200, 500]) {
    await using h = await startHarness({ retryScheduleMs: [10, 10] });
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => answer = resolve);
    await using sink = startWebhookSink(async () => {
      await answered;
      return new Response("answer", { status });
    });
    const { form } = await (await h.admin("POST", "/forms", { name: "Doomed" })).json();
    const added = await h.admin("POST", `/forms/${form.id}/destinations`, webhook(sink.url));
    const destinationId = (await added.json()).destination.id;
    const response = await h.submit(form.publicKey, { name: "in flight" });
    assert.equal(response.status, 202);
    const { submissionId } = await response.json();
    await waitFor(() => sink.hits === 1, { message: "the delivery under way" });

    assert.equal((await h.admin("DELETE", `/forms/${form.id}`)).status, 200);
    answer();
    const attemptLine = () =>
      h.logs.map((line) => JSON.parse(line)).find((line) => line.msg === "delivery attempt");
    await waitFor(() => attemptLine() !== undefined, { message: "the attempt's end" });
    assert.equal(attemptLine().result, "lease lost", `answered ${status}: nothing to write to`);
    assert.match(attemptLine().reason, /destination was deleted/, "the log says why");
    const ids = new Set([form.id, form.publicKey, destinationId, submissionId]);
    const left = leftOfForm(await allKeys(h.service.db.kv), ids);
    assert.deepEqual(left, [], `answered ${status}: no job, envelope or record came back`);
    assert.equal(sink.hits, 1, "no retry of a deleted form's delivery");
  }
});

Deno.test("nothing is sent for a deleted organization: neither by a running notifier nor after a restart", async () => {
  await using ops = startWebhookSink();
  const dir = await Deno.makeTempDir();
  const config = {
    ...loadConfig({
      KV_PATH: `${dir}/formrelay.kv`,
      ALLOW_PRIVATE_DESTINATIONS: "true",
      LOG_LEVEL: "silent",
    }),
  };
  try {
    const first = await startService(config);
    const { orgId, tenantKey } = await createOrg(first.db, "Gone soon");
    const put = await first.app.request("/v1/admin/notifications", {
      method: "PUT",
      headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
      body: JSON.stringify({ webhook: { url: ops.url }, summary: "daily" }),
    });
    assert.equal(put.status, 200);
    await deleteOrg(first.db, orgId);
    // A job queued by a pass that read the settings just before the delete.
    await queueTest(first.db, { orgId, channels: [{ kind: "webhook" }], now: Date.now() });
    await first.notifier.record({ orgId, type: "tenant_key.rotated", subject: "org" });
    await first.notifier.runOnce();
    await first.close();

    // The restarted service's engine finds the job due and drops it without a trace.
    const second = await startService(config);
    try {
      await second.notifier.runOnce();
      await second.engine?.sweep();
      await waitFor(
        async () => naming(await allKeys(second.db.kv), new Set([orgId])).length === 0,
        { message: "the job is dropped, no log is kept" },
      );
    } finally {
      await second.close();
    }
    assert.deepEqual(ops.received.map((r) => r.json?.type), [], "nothing sent");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a disabled organization: its key answers 401 Organization disabled, and it is told nothing until enabled", async () => {
  await using h = await startHarness();
  await using ops = startWebhookSink();
  assert.equal((await h.admin("PUT", "/notifications", { webhook: { url: ops.url } })).status, 200);
  await setOrgDisabled(h.service.db, h.orgId, true);
  const refused = await h.admin("GET", "/forms");
  assert.equal(refused.status, 401);
  assert.deepEqual(await refused.json(), {
    ok: false,
    error: "Organization disabled: the host of this service has disabled it",
  });
  const unknown = await h.admin("GET", "/forms", undefined, { tenantKey: "sk_unknown" });
  assert.equal((await unknown.json()).error, "Invalid tenant key");
  // A job queued just before, and an event meanwhile: neither is sent.
  const refs = await queueTest(h.service.db, {
    orgId: h.orgId,
    channels: [{ kind: "webhook" }],
    now: Date.now(),
  });
  h.service.engine?.wakeNotices(refs);
  await h.service.notifier.record({ orgId: h.orgId, type: "tenant_key.rotated", subject: "org" });
  await h.service.notifier.runOnce();
  await waitFor(async () => (await listNotifyLog(h.service.db, h.orgId, 10)).length === 1, {
    message: "the queued job ended unsent",
  });
  assert.equal(ops.received.length, 0);

  await setOrgDisabled(h.service.db, h.orgId, false);
  const sent = await (await h.admin("GET", "/notifications/sent")).json();
  assert.deepEqual(sent.sent.map((s: { error: string }) => s.error), [
    "Not sent: the organization is disabled",
  ]);
  assert.equal((await h.admin("POST", "/notifications/test")).status, 200);
  await waitFor(() => ops.received.length === 1, { message: "told again once enabled" });
  assert.equal(ops.received[0].json?.type, "test", "the events of the disabled time were dropped");
});
