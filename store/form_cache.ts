import type { Db } from "./db.ts";
import {
  destinationKey,
  type DestinationRecord,
  type DestinationType,
  listDestinationRecords,
} from "./destinations.ts";
import { type FormRecord, getFormByPublicKey } from "./forms.ts";

/** What ingestion needs of a form: the record and its enabled destinations. */
export interface IngestTarget {
  form: FormRecord;
  destinations: { id: string; type: DestinationType }[];
}

/** Bumped by every form or destination write in this process, so its cache is never stale here. */
let generation = 0;

/** Called by the store after any change to a form or its destinations. */
export function noteFormChange(): void {
  generation++;
}

const MAX_ENTRIES = 10_000;

/**
 * A read-through cache of KV look-ups for `ttlMs`, dropped at once by a form or
 * destination write in this process (the generation moves on).
 */
function createTtlCache<T>(
  load: (key: string) => Promise<T>,
  options: { ttlMs: number; now?: () => number },
) {
  const now = options.now ?? Date.now;
  const cache = new Map<string, { value: T; expires: number; generation: number }>();
  return async (key: string): Promise<T> => {
    const hit = cache.get(key);
    if (hit && hit.expires > now() && hit.generation === generation) return hit.value;
    const seenGeneration = generation;
    const value = await load(key);
    if (cache.size >= MAX_ENTRIES) cache.clear();
    cache.set(key, { value, expires: now() + options.ttlMs, generation: seenGeneration });
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
  const get = createTtlCache(async (publicKey): Promise<IngestTarget | null> => {
    const form = await getFormByPublicKey(db, publicKey);
    if (form === null) return null;
    const destinations = (await listDestinationRecords(db, form.id))
      .filter((d) => d.isEnabled)
      .map((d) => ({ id: d.id, type: d.type }));
    return { form, destinations };
  }, options);
  /** The target of a public key (enabled or not), or null when no form has it. */
  return { get };
}

/**
 * Destination records by form and id, cached like ingest targets: the delivery engine
 * reads the destination of every job, and most jobs share a few destinations. Null
 * (deleted) is cached too.
 */
export function createDestinationCache(db: Db, options: { ttlMs: number; now?: () => number }) {
  const get = createTtlCache(async (key): Promise<DestinationRecord | null> => {
    const [formId, destinationId] = key.split("/");
    return (await db.kv.get<DestinationRecord>(destinationKey(formId, destinationId))).value;
  }, options);
  return {
    get: (formId: string, destinationId: string) => get(`${formId}/${destinationId}`),
  };
}
