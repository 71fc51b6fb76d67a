/**
 * Read-through caches of forms and destinations for the hot paths (ingestion looks up
 * a form per request, delivery a destination per job). An entry lives `ttlMs`, and
 * any form or destination write through the same Db drops every entry at once
 * (db.formVersion), so changes made by this process apply immediately.
 *
 * @module
 */
import type { ChangeVersion, Db } from "./db.ts";
import type { DestinationType } from "../connectors/registry.ts";
import { type DestinationRecord, listDestinationRecords } from "./destinations.ts";
import { destinationKey } from "./keys.ts";
import { type FormRecord, getFormByPublicKey } from "./forms.ts";
import { getOrg } from "./orgs.ts";
import type { Condition } from "../rules/routing.ts";

/**
 * What ingestion needs of a form: the record and its enabled destinations, those
 * paused for health marked `held` (their jobs are stored held, see submissions.ts).
 */
export interface IngestTarget {
  form: FormRecord;
  destinations: { id: string; type: DestinationType; held: boolean; conditions?: Condition[] }[];
  /** Some destination has routing conditions (rules/routing.ts): only then are they evaluated. */
  routed: boolean;
}

const MAX_ENTRIES = 10_000;

/**
 * A read-through cache of KV look-ups for `ttlMs`, dropped at once by a form or
 * destination write through the same Db (its version moves on).
 */
function createTtlCache<T>(
  version: ChangeVersion,
  load: (key: string) => Promise<T>,
  options: { ttlMs: number; now?: () => number },
) {
  const now = options.now ?? Date.now;
  const cache = new Map<string, { value: T; expires: number; version: number }>();
  return async (key: string): Promise<T> => {
    const hit = cache.get(key);
    if (hit && hit.expires > now() && hit.version === version.value) return hit.value;
    const seenVersion = version.value;
    const value = await load(key);
    if (cache.size >= MAX_ENTRIES) cache.clear();
    cache.set(key, { value, expires: now() + options.ttlMs, version: seenVersion });
    return value;
  };
}

/**
 * Ingest targets by public key, cached for `ttlMs`: ingestion is the hot path and a KV
 * read costs more than the rest of a request. Writes in this process invalidate at
 * once; another process sharing the KV sees a change within `ttlMs`. The delivery
 * engine re-reads each destination before sending, so a destination disabled or
 * deleted in that window still receives nothing.
 */
export function createIngestTargets(db: Db, options: { ttlMs: number; now?: () => number }) {
  const get = createTtlCache(db.formVersion, async (publicKey): Promise<IngestTarget | null> => {
    const form = await getFormByPublicKey(db, publicKey);
    if (form === null) return null;
    // A disabled (or deleted) organization's forms accept nothing.
    const org = await getOrg(db, form.orgId);
    if (org === null || org.disabledAt) return null;
    const destinations = (await listDestinationRecords(db, form.id))
      .filter((d) => d.isEnabled)
      .map((d) => ({
        id: d.id,
        type: d.type,
        held: d.health.state === "paused",
        ...(d.conditions ? { conditions: d.conditions } : {}),
      }));
    return { form, destinations, routed: destinations.some((d) => d.conditions !== undefined) };
  }, options);
  /** The target of a public key (enabled or not), or null when no form of an active organization has it. */
  return { get };
}

/**
 * Destination records by form and id, cached like ingest targets: the delivery engine
 * reads the destination of every job, and most jobs share a few destinations. Null
 * (deleted) is cached too.
 */
export function createDestinationCache(db: Db, options: { ttlMs: number; now?: () => number }) {
  const get = createTtlCache(db.formVersion, async (key): Promise<DestinationRecord | null> => {
    const [formId, destinationId] = key.split("/");
    return (await db.kv.get<DestinationRecord>(destinationKey(formId, destinationId))).value;
  }, options);
  return {
    get: (formId: string, destinationId: string) => get(`${formId}/${destinationId}`),
  };
}
