import assert from "node:assert/strict";
import { createDb } from "./db.ts";
import { notifyConfirmTokenKey } from "./keys.ts";
import { defaultSettings } from "./notifications.ts";
import {
  beginConfirmation,
  confirmByToken,
  MAX_CONFIRMATIONS_PER_DAY,
  MIN_RESEND_MS,
  saveNotificationSettings,
} from "./notify_confirmations.ts";
import { createSealer, sha256Hex } from "./sealing.ts";

async function withDb(run: (db: ReturnType<typeof createDb>) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  try {
    await run(createDb(kv, await createSealer(crypto.getRandomValues(new Uint8Array(32)))));
  } finally {
    kv.close();
  }
}

Deno.test("confirmation messages: a minute apart, three a day per address; each new link replaces the last", () =>
  withDb(async (db) => {
    const orgId = "org-1";
    const email = { to: ["Ada@Example.org"], via: "platform" };
    const { added } = await saveNotificationSettings(db, orgId, {
      ...defaultSettings("off"),
      email,
    });
    assert.deepEqual(added, ["Ada@Example.org"]);
    const t = Date.UTC(2026, 10, 27, 12);
    const begin = (now: number, address = "ada@example.org") =>
      beginConfirmation(db, { orgId, address, now });
    const first = await begin(t);
    assert.ok("token" in first);
    assert.deepEqual(await begin(t + 1000), {
      refused: "limit",
      retryAfterMs: MIN_RESEND_MS - 1000,
    });
    const tokens = [first.token];
    for (let i = 1; i < MAX_CONFIRMATIONS_PER_DAY; i++) {
      const next = await begin(t + i * MIN_RESEND_MS);
      assert.ok("token" in next);
      tokens.push(next.token);
    }
    const later = t + 10 * MIN_RESEND_MS;
    assert.deepEqual(await begin(later), {
      refused: "limit",
      retryAfterMs: t + 24 * 3600_000 - later,
    });
    assert.deepEqual(await begin(t, "eve@example.org"), { refused: "unknown" });
    // Only the newest link works; the replaced ones are gone from KV.
    for (const old of tokens.slice(0, -1)) {
      assert.equal((await db.kv.get(notifyConfirmTokenKey(await sha256Hex(old)))).value, null);
      assert.equal(await confirmByToken(db, old, later), null);
    }
    assert.deepEqual(await confirmByToken(db, tokens.at(-1)!, later), {
      orgId,
      address: "Ada@Example.org",
    });
    assert.deepEqual(await begin(later + 24 * 3600_000), { refused: "confirmed" });
  }));

Deno.test("a confirmation link expires", () =>
  withDb(async (db) => {
    await saveNotificationSettings(db, "o", {
      ...defaultSettings("off"),
      email: { to: ["a@example.org"], via: "platform" },
    });
    const t = Date.UTC(2026, 10, 27, 12);
    const begun = await beginConfirmation(db, { orgId: "o", address: "a@example.org", now: t });
    assert.ok("token" in begun);
    assert.equal(await confirmByToken(db, begun.token, t + 7 * 24 * 3600_000), null);
    assert.notEqual(await confirmByToken(db, begun.token, t + 7 * 24 * 3600_000 - 1), null);
  }));
