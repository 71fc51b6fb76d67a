/**
 * Platform relay recipients an organization was sent per UTC day, in KV so that the
 * daily cap (PLATFORM_SMTP_ORG_PER_DAY) survives a restart and is shared by every
 * process on the KV. Counted with `sum` mutations, which never conflict; two processes
 * checking at the same moment may pass the cap by one message each.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { relayUsageKey } from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";

const DAY_MS = 24 * 3600 * 1000;

/** The UTC day of a time, `YYYY-MM-DD`. */
export function utcDay(now: number): string {
  return new Date(now).toISOString().slice(0, 10);
}

/** Epoch ms of the start of the UTC day after `now`'s. */
export function nextUtcDay(now: number): number {
  return (Math.floor(now / DAY_MS) + 1) * DAY_MS;
}

/** Recipients counted for the organization on `now`'s UTC day. */
export async function relayUsage(db: Db, orgId: string, now: number): Promise<number> {
  const entry = await db.kv.get<Deno.KvU64>(relayUsageKey(orgId, utcDay(now)));
  return entry.value === null ? 0 : Number(entry.value.value);
}

/** Adds recipients to the organization's count of `now`'s UTC day; drops the count of two days before. */
export async function addRelayUsage(
  db: Db,
  orgId: string,
  options: { recipients: number; now: number },
): Promise<void> {
  const op = db.kv.atomic()
    .sum(relayUsageKey(orgId, utcDay(options.now)), BigInt(options.recipients))
    .delete(relayUsageKey(orgId, utcDay(options.now - 2 * DAY_MS)));
  const result = await retryWhileBusy(() => op.commit());
  if (!result.ok) throw new Error("Cannot count platform relay usage: KV commit failed");
}
