/**
 * Fills the by-destination indexes of jobs and retained records (keys.ts) for records
 * written by versions without them, once per KV: a marker says it is done. Records
 * written since get their entry when they are written (retained, held) or first put
 * back (a pending job). Each entry is written
 * with a check of the record it names, so an entry is never left behind for a record
 * that finished meanwhile.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { decodeJob, type StoredJob } from "./job_record.ts";
import {
  indexMarkerKey,
  jobByDestinationKey,
  jobsPrefix,
  retainedByDestinationKey,
  retainedPrefix,
} from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";

/** Writes the missing index entries, unless a previous run finished; returns how many. */
export async function indexUnindexedRecords(db: Db): Promise<number> {
  if ((await db.kv.get(indexMarkerKey())).value !== null) return 0;
  let written = 0;
  const kinds = [
    { prefix: jobsPrefix(), indexKey: jobByDestinationKey },
    { prefix: retainedPrefix(), indexKey: retainedByDestinationKey },
  ];
  for (const { prefix, indexKey } of kinds) {
    for await (const listed of db.kv.list<StoredJob>({ prefix }, { batchSize: 500 })) {
      const job = decodeJob(listed);
      const key = indexKey(job);
      let entry: Deno.KvEntryMaybe<StoredJob> = listed;
      // A record that changed meanwhile (claimed, put back) is read again; one that went needs none.
      for (let attempt = 0; attempt < 5 && entry.versionstamp !== null; attempt++) {
        const op = db.kv.atomic().check(entry).check({ key, versionstamp: null })
          .set(key, 0);
        if ((await retryWhileBusy(() => op.commit())).ok) {
          written++;
          break;
        }
        if ((await db.kv.get(key)).versionstamp !== null) break;
        entry = await db.kv.get<StoredJob>(listed.key);
      }
    }
  }
  await db.kv.set(indexMarkerKey(), new Date().toISOString());
  return written;
}
