/**
 * Organizations and tenant keys: creating an organization with its first key, looking
 * a key up by its hash, atomic key rotation (at once, as the spec says, or with the
 * earlier keys working until a chosen time, checked on every use), and the host's
 * commands: listing the organizations, issuing a new key for one, disabling, enabling
 * and deleting one.
 *
 * @module
 */
import { type Db, retryAtomic } from "./db.ts";
import {
  hashOfTenantKeyByOrgKey,
  orgKey,
  orgsPrefix,
  tenantKeyByOrgKey,
  tenantKeyKey,
  tenantKeysByOrgPrefix,
} from "./keys.ts";
import { newKey, sha256Hex } from "./sealing.ts";
import { deleteOrgKeys } from "./org_deletion.ts";
import { retryWhileBusy } from "./kv_busy.ts";

/** An organization: the owner of forms and tenant keys. */
export interface OrgRecord {
  id: string;
  name: string;
  createdAt: string;
  /** When the host disabled it (its keys refused, its forms accepting nothing); absent or null: active. */
  disabledAt?: string | null;
}

/** A tenant key, stored by the SHA-256 of its plaintext. */
export interface TenantKeyRecord {
  orgId: string;
  createdAt: string;
  revokedAt: string | null;
  /** When a rotation with an overlap ends it (it stops at that instant); absent: no end. */
  expiresAt?: string;
}

/**
 * The value of an active key's index entry: when it expires (epoch ms), or null. The
 * entry itself expires a minute after the key (KV's expiry is lazy: the record's time is
 * what auth checks), so keys left unused after their end do not stay listed as active.
 */
type KeyIndexValue = number | null;

/** Earlier keys a rotation with an overlap keeps at most; further ones stop at once. */
export const MAX_OVERLAPPING_KEYS = 10;

/** How long a rotation may keep the earlier keys working: 7 days, in hours. */
export const MAX_KEY_OVERLAP_HOURS = 168;

/** Whether a key record is in force at `now` (not revoked, and before its end). */
function inForce(record: TenantKeyRecord, now: number): boolean {
  return record.revokedAt === null &&
    (record.expiresAt === undefined || Date.parse(record.expiresAt) > now);
}

/** Creates an organization with its first tenant key; the plaintext key is returned once. */
export async function createOrg(
  db: Db,
  name: string,
): Promise<{ orgId: string; tenantKey: string }> {
  const org: OrgRecord = { id: crypto.randomUUID(), name, createdAt: new Date().toISOString() };
  const tenantKey = newKey("sk");
  const hash = await sha256Hex(tenantKey);
  const record: TenantKeyRecord = { orgId: org.id, createdAt: org.createdAt, revokedAt: null };
  const op = db.kv.atomic()
    .check({ key: orgKey(org.id), versionstamp: null })
    .check({ key: tenantKeyKey(hash), versionstamp: null })
    .set(orgKey(org.id), org)
    .set(tenantKeyKey(hash), record)
    .set(tenantKeyByOrgKey(org.id, hash), null);
  const commit = await retryWhileBusy(() => op.commit());
  if (!commit.ok) throw new Error("Cannot create organization: key collision, try again");
  return { orgId: org.id, tenantKey };
}

/** An organization, or null when there is none with this id. */
export async function getOrg(db: Db, orgId: string): Promise<OrgRecord | null> {
  return (await db.kv.get<OrgRecord>(orgKey(orgId))).value;
}

/**
 * What a tenant key opens: its organization's id; `disabled` for an active key of an
 * organization the host disabled (told apart so its owner reads why); null when the key
 * is unknown or revoked, or its organization deleted.
 */
export async function authenticateTenantKey(
  db: Db,
  tenantKey: string,
  now = Date.now(),
): Promise<{ orgId: string } | "disabled" | null> {
  const hash = await sha256Hex(tenantKey);
  const entry = await db.kv.get<TenantKeyRecord>(tenantKeyKey(hash));
  if (entry.value === null) return null;
  if (!inForce(entry.value, now)) {
    if (entry.value.revokedAt === null) await retireExpiredKey(db, entry, hash);
    return null;
  }
  const org = await getOrg(db, entry.value.orgId);
  if (org === null) return null;
  return org.disabledAt ? "disabled" : { orgId: org.id };
}

/**
 * Marks a key past its end revoked (at its end) and drops it from the active index;
 * a concurrent write wins (it saw the same end, or revoked the key itself).
 */
async function retireExpiredKey(
  db: Db,
  entry: Deno.KvEntryMaybe<TenantKeyRecord>,
  hash: string,
): Promise<void> {
  const record = entry.value!;
  const retired: TenantKeyRecord = { ...record, revokedAt: record.expiresAt! };
  await retryWhileBusy(() =>
    db.kv.atomic().check(entry).set(tenantKeyKey(hash), retired)
      .delete(tenantKeyByOrgKey(record.orgId, hash)).commit()
  );
}

/**
 * Disables an organization, or enables it again: while disabled its tenant keys are
 * refused (401 Organization disabled), its notifications are not sent, and its forms accept nothing (404, as for a disabled form); what it
 * accepted before is still delivered. Returns the record, or null for no such org.
 */
export async function setOrgDisabled(
  db: Db,
  orgId: string,
  disabled: boolean,
): Promise<OrgRecord | null> {
  const result = await retryAtomic(async () => {
    const entry = await db.kv.get<OrgRecord>(orgKey(orgId));
    if (entry.value === null) return { op: null, result: null };
    const disabledAt = disabled ? entry.value.disabledAt ?? new Date().toISOString() : null;
    const org: OrgRecord = { ...entry.value, disabledAt };
    return { op: db.kv.atomic().check(entry).set(orgKey(orgId), org), result: org };
  });
  // Ingestion's cached forms read their organization again.
  db.formVersion.bump();
  return result;
}

/**
 * Deletes an organization and everything that names it, its forms, destinations, keys
 * or submissions: records, unfinished jobs and envelopes, outcomes, counts, health,
 * notification settings, outbox, jobs and log (org_deletion.ts walks every key family).
 * False for no such org.
 */
export async function deleteOrg(db: Db, orgId: string): Promise<boolean> {
  if (await getOrg(db, orgId) === null) return false;
  // Disabled first, so that no form is created or submission accepted meanwhile.
  await setOrgDisabled(db, orgId, true);
  await deleteOrgKeys(db, orgId);
  db.formVersion.bump();
  return true;
}

/**
 * Adds to `op` the revocation of every active key of an organization (each checked
 * against the version read) and a new active key; returns the new key's plaintext. With
 * `overlapMs`, the earlier keys keep working until `now + overlapMs` instead (never
 * longer than an end they already had; at most MAX_OVERLAPPING_KEYS of them, the ones
 * ending last): returned as `previousValidUntil`, null when they stop at once.
 */
async function revokeAllAndIssue(
  db: Db,
  orgId: string,
  options: { op: Deno.AtomicOperation; now: number; overlapMs?: number },
): Promise<{ tenantKey: string; previousValidUntil: string | null }> {
  const { op, now } = options;
  const nowIso = new Date(now).toISOString();
  const end = options.overlapMs ? now + options.overlapMs : null;
  const overlapping: { hash: string; record: TenantKeyRecord; until: number }[] = [];
  for await (const index of db.kv.list({ prefix: tenantKeysByOrgPrefix(orgId) })) {
    const hash = hashOfTenantKeyByOrgKey(index.key);
    const entry = await db.kv.get<TenantKeyRecord>(tenantKeyKey(hash));
    // The index holds active keys only (and at most MAX_OVERLAPPING_KEYS + 1 of them), so
    // the checks stay within the atomic limit.
    op.check(entry);
    const record = entry.value;
    if (record === null || record.revokedAt !== null) {
      op.delete(index.key);
    } else if (!inForce(record, now)) {
      op.set(tenantKeyKey(hash), { ...record, revokedAt: record.expiresAt! }).delete(index.key);
    } else if (end === null) {
      op.set(tenantKeyKey(hash), { ...record, revokedAt: nowIso }).delete(index.key);
    } else {
      const until = Math.min(end, record.expiresAt ? Date.parse(record.expiresAt) : end);
      overlapping.push({ hash, record, until });
    }
  }
  // The keys ending last overlap; the rest stop now.
  overlapping.sort((a, b) => b.until - a.until);
  for (const [i, { hash, record, until }] of overlapping.entries()) {
    if (i >= MAX_OVERLAPPING_KEYS) {
      op.set(tenantKeyKey(hash), { ...record, revokedAt: nowIso })
        .delete(tenantKeyByOrgKey(orgId, hash));
      continue;
    }
    op.set(tenantKeyKey(hash), { ...record, expiresAt: new Date(until).toISOString() })
      .set(tenantKeyByOrgKey(orgId, hash), until satisfies KeyIndexValue, {
        expireIn: until - now + 60_000,
      });
  }
  const fresh = newKey("sk");
  const freshHash = await sha256Hex(fresh);
  const record: TenantKeyRecord = { orgId, createdAt: nowIso, revokedAt: null };
  op.check({ key: tenantKeyKey(freshHash), versionstamp: null })
    .set(tenantKeyKey(freshHash), record)
    .set(tenantKeyByOrgKey(orgId, freshHash), null satisfies KeyIndexValue);
  const last = overlapping[0]?.until;
  return {
    tenantKey: fresh,
    previousValidUntil: last === undefined ? null : new Date(last).toISOString(),
  };
}

/**
 * Revokes every active key of the caller's organization and issues a new one, in one
 * atomic commit guarded by the caller's key: of concurrent rotations with the same key
 * exactly one succeeds, the others find the key revoked and get null. With `overlapMs`
 * (an addition beyond the spec) the earlier keys work until then instead: the caller's
 * key stays good, so concurrent rotations then succeed one after the other, the last
 * one's key being the only one without an end.
 */
export async function rotateTenantKey(
  db: Db,
  callerKey: string,
  options: { now?: number; overlapMs?: number } = {},
): Promise<{ tenantKey: string; previousValidUntil: string | null } | null> {
  const callerHash = await sha256Hex(callerKey);
  const now = options.now ?? Date.now();
  return await retryAtomic(async () => {
    const caller = await db.kv.get<TenantKeyRecord>(tenantKeyKey(callerHash));
    if (caller.value === null || !inForce(caller.value, now)) {
      return { op: null, result: null };
    }
    const op = db.kv.atomic().check(caller);
    const result = await revokeAllAndIssue(db, caller.value.orgId, { ...options, op, now });
    return { op, result };
  });
}

/**
 * The host's way back into an organization whose tenant key is lost: every active key
 * is revoked and a new one issued (its plaintext returned once); null for no such org.
 */
export async function issueTenantKey(db: Db, orgId: string): Promise<string | null> {
  return await retryAtomic(async () => {
    const org = await db.kv.get<OrgRecord>(orgKey(orgId));
    if (org.value === null) return { op: null, result: null };
    const op = db.kv.atomic().check(org);
    const issued = await revokeAllAndIssue(db, orgId, { op, now: Date.now() });
    return { op, result: issued.tenantKey };
  });
}

/** Every organization, with how many active tenant keys it has, oldest first. */
export async function listOrgs(
  db: Db,
  now = Date.now(),
): Promise<(OrgRecord & { activeKeys: number })[]> {
  const orgs: (OrgRecord & { activeKeys: number })[] = [];
  for await (const entry of db.kv.list<OrgRecord>({ prefix: orgsPrefix() })) {
    let activeKeys = 0;
    const prefix = tenantKeysByOrgPrefix(entry.value.id);
    for await (const index of db.kv.list<KeyIndexValue>({ prefix })) {
      if (index.value === null || index.value > now) activeKeys++;
    }
    orgs.push({ ...entry.value, activeKeys });
  }
  return orgs.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}
