/**
 * Refusals counted per form, reason and UTC day, so that a tenant sees in the console
 * what never reached them (FORM_REFUSAL_REASONS, refusal_reasons.ts): submissions refused
 * for their origin, captcha, rate, size, type or body, turned away while the service was
 * full or busy, caught as spam, or accepted while the form had no enabled destination. Only
 * counts are kept, never the submission. Counts gather in memory and are written as KV
 * sums at most every few seconds (and at close): a flood of refusals costs one small
 * commit per interval, not one per request. Counts older than 30 days are pruned when
 * read. Beside the counts, the last few distinct sites refused for their origin
 * ({@linkcode MAX_REFUSED_ORIGINS}: the origin only, `scheme://host[:port]`, and when), so
 * that an owner sees which site tried, kept and written the same way. Both are written
 * only while their form exists (each commit checks it): a form deleted meanwhile, in this
 * process or another, loses what was counted for it instead of getting it back.
 *
 * @module
 */
import type { Db } from "./db.ts";
import {
  formKey,
  refusalCountKey,
  refusalCountKeyParts,
  refusalsOfFormPrefix,
  refusedOriginsKey,
} from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { SPAM_RULES, type SpamRule } from "../rules/spam.ts";
import {
  FORM_REFUSAL_REASONS,
  type FormRefusalReason,
  isFormRefusalReason,
} from "../refusal_reasons.ts";

/**
 * A count of one spam rule: what it caught (`spam:<rule>`, also counted in `spam`), or in
 * observe mode what it would have caught (`observed:<rule>`: delivered all the same).
 * Kept like the refusals, per form and day for 30 days, so turning a rule on can show
 * what it would have caught in the days it was observed.
 */
export type RuleCount = `spam:${SpamRule}` | `observed:${SpamRule}`;
/** What the refusal counter counts. */
export type CountedReason = FormRefusalReason | RuleCount;

/** How long counts are kept. */
const KEEP_DAYS = 30;
/** How many distinct refused origins a form keeps: the most recently refused. */
export const MAX_REFUSED_ORIGINS = 5;
/** Longest origin kept; a longer one (a hostile header) is not. */
const MAX_ORIGIN_CHARS = 200;

/** A site refused for its origin, and when it was last refused (ms since the epoch). */
export interface RefusedOrigin {
  origin: string;
  lastSeen: number;
}
/**
 * Forms per commit of their counts: one getMany reads their records (KV reads 10 at most),
 * and their sums (two days of every reason at most between flushes) stay well under KV's
 * 1000 mutations.
 */
const FORMS_PER_COMMIT = 10;
const DAY_MS = 86_400_000;

/** The UTC day of a time, `YYYY-MM-DD`. */
export function dayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** The counter ingestion reports refusals to. */
export interface RefusalCounter {
  /** Counts one refusal of a submission to a form, or one catch of a spam rule. */
  count(formId: string, reason: CountedReason): void;
  /** Notes the origin of a submission (or preflight) refused for it. */
  refusedOrigin(formId: string, origin: string): void;
  /** Refused origins not yet written, for `formId`. */
  pendingOrigins(formId: string): RefusedOrigin[];
  /** Counts not yet written, for `formId` (added to what is read from KV). */
  pending(formId: string): { day: string; reason: CountedReason; count: number }[];
  /** Writes what has been counted; resolves once written. */
  flush(): Promise<void>;
}

/** A counter that writes at most every `flushMs` (and on flush()). */
export function createRefusalCounter(
  db: Db,
  options: { flushMs?: number; now?: () => number } = {},
): RefusalCounter {
  const flushMs = options.flushMs ?? 5_000;
  const now = options.now ?? Date.now;
  /** `formId\0day\0reason` → count. */
  let counts = new Map<string, number>();
  /** formId → origin → when last refused. */
  let origins = new Map<string, Map<string, number>>();
  let lastFlush = now();
  let writing: Promise<void> = Promise.resolve();

  async function write(batch: Map<string, number>) {
    const byForm = new Map<string, [day: string, reason: string, n: number][]>();
    for (const [name, n] of batch) {
      const [formId, day, reason] = name.split("\0");
      const sums = byForm.get(formId) ?? [];
      sums.push([day, reason, n]);
      byForm.set(formId, sums);
    }
    const forms = [...byForm.keys()];
    for (let i = 0; i < forms.length; i += FORMS_PER_COMMIT) {
      const ids = forms.slice(i, i + FORMS_PER_COMMIT);
      for (let tries = 0; tries < 5; tries++) {
        const records = await db.kv.getMany(ids.map(formKey));
        const op = db.kv.atomic();
        records.forEach((record, k) => {
          if (record.versionstamp === null) return;
          op.check(record);
          for (const [day, reason, n] of byForm.get(ids[k])!) {
            op.sum(refusalCountKey(ids[k], day, reason), BigInt(n));
          }
        });
        if ((await retryWhileBusy(() => op.commit())).ok) break;
      }
    }
  }

  /** Merges a form's newly refused origins into its kept list (checked, retried on a race). */
  async function writeOrigins(formId: string, seen: Map<string, number>) {
    const key = refusedOriginsKey(formId);
    for (let tries = 0; tries < 5; tries++) {
      const [record, entry] = await db.kv.getMany<[unknown, RefusedOrigin[]]>([
        formKey(formId),
        key,
      ]);
      if (record.versionstamp === null) return;
      const kept = (entry.value ?? []).toReversed();
      const merged = latestOrigins([...kept, ...originList(seen)]);
      const op = db.kv.atomic().check(record, entry)
        .set(key, merged, { expireIn: KEEP_DAYS * DAY_MS });
      if ((await retryWhileBusy(() => op.commit())).ok) return;
    }
  }

  function flush(): Promise<void> {
    lastFlush = now();
    if (counts.size === 0 && origins.size === 0) return writing;
    const batch = counts;
    const seen = origins;
    counts = new Map();
    origins = new Map();
    // One write at a time, in order; a failed one is lost (they are counts, not data).
    writing = writing.then(async () => {
      await write(batch);
      for (const [formId, byOrigin] of seen) await writeOrigins(formId, byOrigin);
    }).catch(() => {});
    return writing;
  }

  return {
    count(formId, reason) {
      const name = `${formId}\0${dayOf(now())}\0${reason}`;
      counts.set(name, (counts.get(name) ?? 0) + 1);
      if (now() - lastFlush >= flushMs) flush();
    },
    refusedOrigin(formId, origin) {
      if (origin.length > MAX_ORIGIN_CHARS) return;
      let seen = origins.get(formId);
      if (seen === undefined) origins.set(formId, seen = new Map());
      // Delete first, so the map keeps the newest last and is cut from the oldest.
      seen.delete(origin);
      seen.set(origin, now());
      if (seen.size > MAX_REFUSED_ORIGINS) seen.delete(seen.keys().next().value!);
      if (now() - lastFlush >= flushMs) flush();
    },
    pendingOrigins(formId) {
      return originList(origins.get(formId) ?? new Map());
    },
    pending(formId) {
      const found: { day: string; reason: CountedReason; count: number }[] = [];
      for (const [name, count] of counts) {
        const [id, day, reason] = name.split("\0");
        if (id === formId) found.push({ day, reason: reason as CountedReason, count });
      }
      return found;
    },
    flush,
  };
}

/** Counts per spam rule. */
export type RuleCounts = Record<SpamRule, number>;

/**
 * A form's refusal counts of one day, by reason, with `spam` split by the rule that
 * caught it (`spamByRule`; the honeypot's catches are `spam` less their sum) and what
 * rules in observe mode would have caught (`observedByRule`).
 */
export type DayRefusals =
  & { day: string; spamByRule: RuleCounts; observedByRule: RuleCounts }
  & Record<FormRefusalReason, number>;

/**
 * A form's refusal counts for the last `days` UTC days (today last), zeros included,
 * with the counter's unwritten counts; prunes counts older than 30 days.
 */
export async function readRefusals(
  db: Db,
  formId: string,
  options: { days: number; now: number; counter?: RefusalCounter },
): Promise<DayRefusals[]> {
  const days = Array.from(
    { length: options.days },
    (_, i) => dayOf(options.now - (options.days - 1 - i) * DAY_MS),
  );
  const byDay = new Map<string, DayRefusals>(days.map((day) => [day, emptyDay(day)]));
  const oldest = dayOf(options.now - KEEP_DAYS * DAY_MS);
  for await (const entry of db.kv.list<Deno.KvU64>({ prefix: refusalsOfFormPrefix(formId) })) {
    const { day, reason } = refusalCountKeyParts(entry.key);
    if (day < oldest) {
      await retryWhileBusy(() => db.kv.atomic().check(entry).delete(entry.key).commit());
      continue;
    }
    add(byDay.get(day), reason, Number(entry.value.value));
  }
  for (const { day, reason, count } of options.counter?.pending(formId) ?? []) {
    add(byDay.get(day), reason, count);
  }
  return days.map((day) => byDay.get(day)!);
}

function emptyDay(day: string): DayRefusals {
  const counts = Object.fromEntries(FORM_REFUSAL_REASONS.map((reason) => [reason, 0]));
  const rules = () => Object.fromEntries(SPAM_RULES.map((rule) => [rule, 0])) as RuleCounts;
  return { day, ...counts, spamByRule: rules(), observedByRule: rules() } as DayRefusals;
}

function add(day: DayRefusals | undefined, reason: string, count: number) {
  if (day === undefined) return;
  const [kind, rule] = reason.split(":");
  if (rule !== undefined) {
    const counts = kind === "spam"
      ? day.spamByRule
      : kind === "observed"
      ? day.observedByRule
      : null;
    if (counts !== null && (SPAM_RULES as string[]).includes(rule)) {
      counts[rule as SpamRule] += count;
    }
  } else if (isFormRefusalReason(reason)) {
    day[reason] += count;
  }
}

function originList(seen: Map<string, number>): RefusedOrigin[] {
  return [...seen].map(([origin, lastSeen]) => ({ origin, lastSeen }));
}

/**
 * The most recently refused distinct origins, newest first, at most MAX_REFUSED_ORIGINS.
 * `list` is oldest first: of two refused in the same millisecond, the later listed is newer.
 */
function latestOrigins(list: RefusedOrigin[]): RefusedOrigin[] {
  const latest = new Map<string, number>();
  for (const { origin, lastSeen } of list) {
    const at = Math.max(lastSeen, latest.get(origin) ?? 0);
    latest.delete(origin);
    latest.set(origin, at);
  }
  // Stable sort of the reversed list: ties keep newest first.
  return originList(latest).reverse().sort((a, b) => b.lastSeen - a.lastSeen).slice(
    0,
    MAX_REFUSED_ORIGINS,
  );
}

/**
 * The last few distinct origins a form refused, newest first (at most
 * MAX_REFUSED_ORIGINS), with the counter's unwritten ones.
 */
export async function readRefusedOrigins(
  db: Db,
  formId: string,
  counter?: RefusalCounter,
): Promise<RefusedOrigin[]> {
  const kept = (await db.kv.get<RefusedOrigin[]>(refusedOriginsKey(formId))).value ?? [];
  // Kept newest first; pending oldest first.
  return latestOrigins([...kept.toReversed(), ...(counter?.pendingOrigins(formId) ?? [])]);
}
