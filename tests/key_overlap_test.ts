/**
 * Tenant key rotation with an overlap (an addition beyond the spec): `POST /keys/rotate`
 * with `{ "expiresInHours": N }` keeps the earlier keys working until then, checked on
 * every use; without a body the spec's rotation is unchanged (tests/admin_test.ts). The
 * service's clock is moved, never slept on.
 */
import assert from "node:assert/strict";
import { expectError } from "./helpers/assert.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";
import { tenantKeyKey, tenantKeysByOrgPrefix } from "../store/keys.ts";
import { listOrgs, MAX_OVERLAPPING_KEYS, type TenantKeyRecord } from "../store/orgs.ts";
import { sha256Hex } from "../store/sealing.ts";

const HOUR = 3_600_000;
const T0 = Date.parse("2026-03-01T12:00:00.000Z");

Deno.test("earlier keys work until the chosen time and stop exactly then", async (t) => {
  let clock = T0;
  await using h = await startHarness({}, { deliver: false, now: () => clock });
  const old = h.tenantKey;
  const forms = (tenantKey: string) => h.admin("GET", "/forms", undefined, { tenantKey });

  const response = await h.admin("POST", "/keys/rotate", { expiresInHours: 2 });
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.ok, true);
  assert.match(body.tenantKey, /^sk_[A-Za-z0-9_-]{43}$/);
  assert.equal(body.previousKeysValidUntil, "2026-03-01T14:00:00.000Z");
  const fresh = body.tenantKey;

  await t.step("both keys work during the overlap, up to its last millisecond", async () => {
    assert.equal((await forms(old)).status, 200);
    assert.equal((await forms(fresh)).status, 200);
    clock = T0 + 2 * HOUR - 1;
    assert.equal((await forms(old)).status, 200);
  });

  await t.step("at the end the earlier key is refused, the new one works", async () => {
    clock = T0 + 2 * HOUR;
    await expectError(await forms(old), 401, "Invalid tenant key");
    assert.equal((await forms(fresh)).status, 200);
  });

  await t.step(
    "the expired key is cleaned up: revoked at its end, no longer listed active",
    async () => {
      const hash = await sha256Hex(old);
      const record = (await h.service.db.kv.get<TenantKeyRecord>(tenantKeyKey(hash))).value!;
      assert.equal(record.revokedAt, "2026-03-01T14:00:00.000Z");
      const active = [];
      for await (const entry of h.service.db.kv.list({ prefix: tenantKeysByOrgPrefix(h.orgId) })) {
        active.push(entry.key.at(-1));
      }
      assert.deepEqual(active, [await sha256Hex(fresh)]);
      // Rotating with it is refused too.
      await expectError(
        await h.admin("POST", "/keys/rotate", undefined, { tenantKey: old }),
        401,
        "Invalid tenant key",
      );
    },
  );
});

Deno.test("a rotation without a body still stops every key at once, overlapping ones too", async () => {
  const clock = T0;
  await using h = await startHarness({}, { deliver: false, now: () => clock });
  const first = h.tenantKey;
  const second = (await (await h.admin("POST", "/keys/rotate", { expiresInHours: 24 })).json())
    .tenantKey;
  // The spec's call, made with the earlier (still working) key: the answer is the spec's.
  const response = await h.admin("POST", "/keys/rotate", undefined, { tenantKey: first });
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.deepEqual(Object.keys(body).sort(), ["ok", "tenantKey"]);
  for (const key of [first, second]) {
    await expectError(
      await h.admin("GET", "/forms", undefined, { tenantKey: key }),
      401,
      "Invalid tenant key",
    );
  }
  assert.equal(
    (await h.admin("GET", "/forms", undefined, { tenantKey: body.tenantKey })).status,
    200,
  );
  // expiresInHours 0 is the same as no body.
  const zero = await h.admin("POST", "/keys/rotate", { expiresInHours: 0 }, {
    tenantKey: body.tenantKey,
  });
  const zeroBody = await zero.json();
  assert.equal(zeroBody.previousKeysValidUntil, null);
  await expectError(
    await h.admin("GET", "/forms", undefined, { tenantKey: body.tenantKey }),
    401,
    "Invalid tenant key",
  );
});

Deno.test("a rotation never lengthens an earlier key's life", async () => {
  let clock = T0;
  await using h = await startHarness({}, { deliver: false, now: () => clock });
  const first = h.tenantKey;
  const second = (await (await h.admin("POST", "/keys/rotate", { expiresInHours: 1 })).json())
    .tenantKey;
  clock = T0 + 30 * 60_000;
  const third = await (await h.admin("POST", "/keys/rotate", { expiresInHours: 168 }, {
    tenantKey: second,
  })).json();
  assert.equal(third.previousKeysValidUntil, new Date(T0 + 30 * 60_000 + 168 * HOUR).toISOString());
  clock = T0 + HOUR;
  const forms = (tenantKey: string) => h.admin("GET", "/forms", undefined, { tenantKey });
  await expectError(await forms(first), 401, "Invalid tenant key");
  assert.equal((await forms(second)).status, 200);
  assert.equal((await forms(third.tenantKey)).status, 200);
});

Deno.test(`at most ${MAX_OVERLAPPING_KEYS} earlier keys overlap: older ones stop at once`, async () => {
  let clock = T0;
  await using h = await startHarness({}, { deliver: false, now: () => clock });
  const keys = [h.tenantKey];
  for (let i = 0; i < MAX_OVERLAPPING_KEYS + 2; i++) {
    clock += 1000;
    const rotated = await h.admin("POST", "/keys/rotate", { expiresInHours: 1 + i }, {
      tenantKey: keys.at(-1),
    });
    keys.push((await rotated.json()).tenantKey);
  }
  let working = 0;
  for (const key of keys) {
    if ((await h.admin("GET", "/forms", undefined, { tenantKey: key })).status === 200) working++;
  }
  assert.equal(working, MAX_OVERLAPPING_KEYS + 1);
  const [org] = (await listOrgs(h.service.db, clock)).filter((o) => o.id === h.orgId);
  assert.equal(org.activeKeys, MAX_OVERLAPPING_KEYS + 1);
});

Deno.test("POST /keys/rotate refuses a bad body with the contract's errors and rotates nothing", async () => {
  await using h = await startHarness({}, { deliver: false });
  for (const body of [{ expiresInHours: 169 }, { expiresInHours: -1 }, { expiresInHours: "2" }]) {
    const answer = await expectError(
      await h.admin("POST", "/keys/rotate", body),
      400,
      "Validation error",
    );
    assert.equal(answer.issues[0].path, "expiresInHours");
  }
  await expectError(await h.admin("POST", "/keys/rotate", { hours: 2 }), 400, "Validation error");
  const notJson = await h.request("/v1/admin/keys/rotate", {
    method: "POST",
    headers: { "x-tenant-key": h.tenantKey, "content-type": "application/json" },
    body: "{",
  });
  await expectError(notJson, 400, "Invalid JSON body");
  // Nothing was rotated: the key still works.
  assert.equal((await h.admin("GET", "/forms")).status, 200);
});

Deno.test("the tenant_key.rotated notice says when the earlier keys stop", async () => {
  const clock = Date.now();
  await using h = await startHarness({}, { now: () => clock });
  await using ops = startWebhookSink();
  assert.equal((await h.admin("PUT", "/notifications", { webhook: { url: ops.url } })).status, 200);
  const rotated = await (await h.admin("POST", "/keys/rotate", { expiresInHours: 6 })).json();
  const told = () => ops.received.filter((r) => r.json?.type === "tenant_key.rotated");
  await waitFor(() => told().length === 1, { message: "rotation told" });
  const data = told()[0].json!.data as Record<string, unknown>;
  assert.equal(data.earlierKeysStop, rotated.previousKeysValidUntil);
  assert.equal("lastError" in data, false);
  assert.ok(!told()[0].body.includes(rotated.tenantKey), "never the key");
});
