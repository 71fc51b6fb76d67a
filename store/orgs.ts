/**
 * Organizations and tenant keys: creating an organization with its first key, looking
 * a key up by its hash, atomic key rotation, and the host's commands: listing the
 * organizations, issuing a new key for one, disabling, enabling and deleting one.
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
): Promise<{ orgId: string } | "disabled" | null> {
  const entry = await db.kv.get<TenantKeyRecord>(tenantKeyKey(await sha256Hex(tenantKey)));
  if (entry.value === null || entry.value.revokedAt !== null) return null;
  const org = await getOrg(db, entry.value.orgId);
  if (org === null) return null;
  return org.disabledAt ? "disabled" : { orgId: org.id };
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
 * against the version read) and a new active key; returns the new key's plaintext.
 */
async function revokeAllAndIssue(
  db: Db,
  orgId: string,
  op: Deno.AtomicOperation,
): Promise<string> {
  const now = new Date().toISOString();
  for await (const index of db.kv.list({ prefix: tenantKeysByOrgPrefix(orgId) })) {
    const hash = hashOfTenantKeyByOrgKey(index.key);
    const entry = await db.kv.get<TenantKeyRecord>(tenantKeyKey(hash));
    // The index holds active keys only, so the checks stay within the atomic limit.
    op.check(entry).delete(index.key);
    if (entry.value !== null && entry.value.revokedAt === null) {
      op.set(tenantKeyKey(hash), { ...entry.value, revokedAt: now });
    }
  }
  const fresh = newKey("sk");
  const freshHash = await sha256Hex(fresh);
  const record: TenantKeyRecord = { orgId, createdAt: now, revokedAt: null };
  op.check({ key: tenantKeyKey(freshHash), versionstamp: null })
    .set(tenantKeyKey(freshHash), record)
    .set(tenantKeyByOrgKey(orgId, freshHash), null);
  return fresh;
}

/**
 * Revokes every active key of the caller's organization and issues a new one, in one
 * atomic commit guarded by the caller's key: of concurrent rotations with the same key
 * exactly one succeeds, the others find the key revoked and get null.
 */
export async function rotateTenantKey(db: Db, callerKey: string): Promise<string | null> {
  const callerHash = await sha256Hex(callerKey);
  return await retryAtomic(async () => {
    const caller = await db.kv.get<TenantKeyRecord>(tenantKeyKey(callerHash));
    if (caller.value === null || caller.value.revokedAt !== null) {
      return { op: null, result: null };
    }
    const op = db.kv.atomic().check(caller);
    return { op, result: await revokeAllAndIssue(db, caller.value.orgId, op) };
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
    return { op, result: await revokeAllAndIssue(db, orgId, op) };
  });
}

/** Every organization, with how many active tenant keys it has, oldest first. */
export async function listOrgs(db: Db): Promise<(OrgRecord & { activeKeys: number })[]> {
  const orgs: (OrgRecord & { activeKeys: number })[] = [];
  for await (const entry of db.kv.list<OrgRecord>({ prefix: orgsPrefix() })) {
    let activeKeys = 0;
    for await (const _ of db.kv.list({ prefix: tenantKeysByOrgPrefix(entry.value.id) })) {
      activeKeys++;
    }
    orgs.push({ ...entry.value, activeKeys });
  }
  return orgs.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}
