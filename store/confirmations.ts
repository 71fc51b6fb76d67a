/**
 * The limits of confirmations to visitors, kept in KV so that every process shares
 * them: one per mailbox per form per 24 hours (the mailbox, rules/confirmation.ts's
 * mailboxOf, only as a keyed hash, which cannot be turned back into it), and a form's
 * hourly cap. A confirmation is reserved when its submission is accepted, before its job
 * is written: a submission that then fails to store has used its slot, which errs on the
 * side of the address's owner.
 *
 * @module
 */
import type { Db } from "./db.ts";
import { confirmationHourKey, confirmationSentKey } from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";

const DAY_MS = 24 * 3600 * 1000;
const HOUR_MS = 3600 * 1000;
/** Commits lost to a concurrent reservation before giving up (and sending none). */
const ATTEMPTS = 5;

/** Whether a confirmation may go, or which limit stops it. */
export type Reservation = "reserved" | "address_limit" | "hourly_limit";

/**
 * Reserves a confirmation from a form to a mailbox at `now`, within one per mailbox
 * per 24 hours and `maxPerHour` per form.
 */
export async function reserveConfirmation(
  db: Db,
  { formId, mailbox, maxPerHour, now }: {
    formId: string;
    /** The mailbox as mailboxOf folds it: one slot for all of its spellings. */
    mailbox: string;
    maxPerHour: number;
    now: number;
  },
): Promise<Reservation> {
  const sentKey = confirmationSentKey(
    formId,
    db.sealer.pseudonym(`confirmation\0${formId}\0${mailbox}`),
  );
  const hourKey = confirmationHourKey(formId, Math.floor(now / HOUR_MS));
  for (let i = 0; i < ATTEMPTS; i++) {
    const [sent, hour] = await db.kv.getMany<[number, number]>([sentKey, hourKey]);
    if (sent.value !== null) return "address_limit";
    const count = hour.value ?? 0;
    if (count >= maxPerHour) return "hourly_limit";
    const commit = await retryWhileBusy(() =>
      db.kv.atomic().check(sent).check(hour)
        .set(sentKey, now, { expireIn: DAY_MS })
        .set(hourKey, count + 1, { expireIn: 2 * HOUR_MS })
        .commit()
    );
    if (commit.ok) return "reserved";
  }
  return "hourly_limit";
}
