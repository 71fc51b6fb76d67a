/**
 * Deleting everything an organization owns: every key of every family in
 * keys.ts's KEY_FAMILIES that names the organization, one of its forms, destinations,
 * tenant keys, public keys or submissions. The walk follows the declarations, so a new
 * family is covered once it declares what it names (keys_test.ts insists it does). The
 * same walk, started from other ids (deleteKeysNaming), deletes what one form owns.
 *
 * A family whose keys lead with an id the walk knows is read by prefix, one id at a
 * time; the others (jobs, envelopes, retained failures, tenant keys by hash,
 * notification jobs) are read whole: the host deletes an organization rarely, and those
 * families hold unfinished work, not history. Ids are learnt as the walk goes (a form's
 * destinations, a job's submission), so it walks again until a pass learns nothing new.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { type FamilyNames, type IdKind, KEY_FAMILIES } from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";

/** Deletes in commits of this many keys (KV allows 1 000 mutations per commit). */
const BATCH = 500;

type Known = Record<IdKind, Set<string>>;

/** Deletes every key naming the organization or what it owns; how many keys went. */
export function deleteOrgKeys(db: Db, orgId: string): Promise<number> {
  return deleteKeysNaming(db, { org: [orgId] });
}

/**
 * Deletes every key naming one of the `seed` ids, or an id learnt from such a key (a
 * form's destinations, a job's submission; never an organization, which only a seed
 * names); how many keys went.
 */
export async function deleteKeysNaming(
  db: Db,
  seed: Partial<Record<IdKind, Iterable<string>>>,
): Promise<number> {
  const known: Known = {
    org: new Set(seed.org),
    form: new Set(seed.form),
    destination: new Set(seed.destination),
    submission: new Set(seed.submission),
    tenantKey: new Set(seed.tenantKey),
    publicKey: new Set(seed.publicKey),
  };
  const size = () => Object.values(known).reduce((sum, ids) => sum + ids.size, 0);
  let deleted = 0;
  let before = -1;
  while (size() !== before) {
    before = size();
    for (const [family, names] of Object.entries(KEY_FAMILIES)) {
      if (names !== null) deleted += await deleteFamily(db, family, names, known);
    }
  }
  return deleted;
}

/** The ids an entry names, by kind. */
function idsOf(names: FamilyNames, entry: Deno.KvEntry<unknown>): [IdKind, string][] {
  const ids: [IdKind, string][] = [];
  for (const [position, kind] of Object.entries(names.key)) {
    const part = entry.key[Number(position)];
    if (typeof part === "string") ids.push([kind!, part]);
  }
  const value = entry.value;
  if (typeof value === "object" && value !== null) {
    for (const [field, kind] of Object.entries(names.value ?? {})) {
      const part = (value as Record<string, unknown>)[field];
      if (typeof part === "string") ids.push([kind, part]);
    }
  }
  return ids;
}

async function deleteFamily(
  db: Db,
  family: string,
  names: FamilyNames,
  known: Known,
): Promise<number> {
  const leading = names.key[1];
  // Entries found by what their value names, or by a submission, need the whole family.
  const prefixes = leading === undefined || leading === "submission" || names.value !== undefined
    ? [[family]]
    : [...known[leading]].map((id) => [family, id]);
  let batch: Deno.KvKey[] = [];
  let deleted = 0;
  const flush = async () => {
    const keys = batch;
    batch = [];
    const op = db.kv.atomic();
    for (const key of keys) op.delete(key);
    const result = await retryWhileBusy(() => op.commit());
    if (!result.ok) {
      throw new Error("Cannot delete the keys naming what is deleted: KV commit failed");
    }
    deleted += keys.length;
  };
  for (const prefix of prefixes) {
    // A prefix lists the keys under it, not the key that is the prefix itself.
    const exact = prefix.length > 1 ? [await db.kv.get(prefix)] : [];
    const entries = [...exact.filter((entry) => entry.versionstamp !== null)];
    for await (const entry of db.kv.list({ prefix })) entries.push(entry);
    for (const entry of entries) {
      const ids = idsOf(names, entry);
      if (!ids.some(([kind, id]) => known[kind].has(id))) continue;
      for (const [kind, id] of ids) {
        if (names.defines?.includes(kind)) known[kind].add(id);
      }
      batch.push(entry.key);
      if (batch.length >= BATCH) await flush();
    }
  }
  if (batch.length > 0) await flush();
  return deleted;
}
