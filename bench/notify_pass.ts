/**
 * bench:notify-pass — what one pass for owner notifications reads from KV with many
 * organizations on the host. A fresh KV file holds BENCH_ORGS (default 10 000)
 * organizations, each with an outbox group and a notice job that are not due (grouped
 * into the next hour, a retry an hour away), and BENCH_DUE (default 10) organizations with
 * one group and one job due now. One pass is what the notifier and the engine's sweep do
 * for notifications: the due outbox groups (dueEvents) and the due notice jobs
 * (listDueNotices). Keys read are counted on the KV handle (a get, each key of a getMany,
 * each entry a listing returns); beside them, what listing the two whole prefixes, as a
 * pass did before the due indexes, reads.
 */
import { createDb } from "../store/db.ts";
import {
  notifyDueKey,
  notifyJobKey,
  notifyJobsPrefix,
  notifyOutboxDueKey,
  notifyOutboxKey,
  notifyOutboxPrefix,
} from "../store/keys.ts";
import { listDueNotices } from "../store/notice_jobs.ts";
import { dueEvents, type NotifyJob, type PendingEvent } from "../store/notifications.ts";
import { createSealer } from "../store/sealing.ts";

const ORGS = Number(Deno.env.get("BENCH_ORGS") ?? "10000");
const DUE = Number(Deno.env.get("BENCH_DUE") ?? "10");

let keysRead = 0;
/** A KV handle that counts the keys read through it. */
function countingKv(kv: Deno.Kv): Deno.Kv {
  return new Proxy(kv, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== "function") return value;
      if (prop === "get") return (...args: unknown[]) => (keysRead++, value.apply(target, args));
      if (prop === "getMany") {
        return (keys: unknown[], ...rest: unknown[]) => {
          keysRead += keys.length;
          return value.apply(target, [keys, ...rest]);
        };
      }
      if (prop === "list") {
        return (...args: unknown[]) => {
          const iterator = value.apply(target, args) as Deno.KvListIterator<unknown>;
          return (async function* () {
            for await (const entry of iterator) {
              keysRead++;
              yield entry;
            }
          })();
        };
      }
      return value.bind(target);
    },
  });
}

const dir = await Deno.makeTempDir({ prefix: "notify_pass_" });
const kv = await Deno.openKv(`${dir}/kv.sqlite3`);
try {
  const now = Date.now();
  const later = now + 3_600_000;
  const total = ORGS + DUE;
  // Written directly, 100 organizations a commit: the setup is not what is measured.
  for (let first = 0; first < total; first += 100) {
    const op = kv.atomic();
    for (let i = first; i < Math.min(total, first + 100); i++) {
      const orgId = `org-${i}`;
      const dueAt = i < ORGS ? later : now;
      const event: PendingEvent = {
        orgId,
        type: "message.attempt.exhausted",
        subject: "dest",
        formId: "form",
        destinationId: "dest",
        count: 1,
        firstAt: now,
        lastAt: now,
        submissionIds: [],
        detail: null,
        held: null,
        dueAt,
      };
      const job: NotifyJob = {
        id: `job-${i}`,
        orgId,
        channel: { kind: "webhook" },
        event,
        attempts: 1,
        dueAt,
        createdAt: now,
      };
      op.set(notifyOutboxKey(orgId, event.type, event.subject), event)
        .set(notifyOutboxDueKey(dueAt, orgId, event.type, event.subject), 0)
        .set(notifyJobKey(orgId, job.id), job)
        .set(notifyDueKey(dueAt, orgId, job.id), "webhook");
    }
    if (!(await op.commit()).ok) throw new Error("setup commit failed");
  }
  const db = createDb(countingKv(kv), await createSealer(new Uint8Array(32)));

  keysRead = 0;
  const events = await dueEvents(db, { now, limit: 100 });
  const jobs = await listDueNotices(db, { now, limit: 10_000 });
  const pass = keysRead;

  keysRead = 0;
  for await (const _ of db.kv.list({ prefix: notifyOutboxPrefix() })) { /* counted */ }
  for await (const _ of db.kv.list({ prefix: notifyJobsPrefix() })) { /* counted */ }
  const wholePrefixes = keysRead;

  console.log(
    JSON.stringify({
      organizations: total,
      due: { events: events.length, jobs: jobs.length },
      keysReadPerPass: pass,
      keysReadListingWholePrefixes: wholePrefixes,
    }),
  );
} finally {
  kv.close();
  await Deno.remove(dir, { recursive: true });
}
