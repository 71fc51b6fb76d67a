/**
 * Daily and weekly summaries: the last complete UTC day (or Monday-to-Sunday week)
 * of an organization's forms, from the counts that exist: submissions with a recorded
 * delivery outcome, deliveries delivered and failed, refusals by reason (spam and "sent
 * nowhere" among them). Never a submission's content.
 *
 * @module
 */
import type { Db } from "../store/db.ts";
import { listForms } from "../store/forms.ts";
import { countOutcomes } from "../store/notifications.ts";
import { FORM_REFUSAL_REASONS } from "../refusal_reasons.ts";
import { readRefusals } from "../store/refusals.ts";

const DAY_MS = 86_400_000;

/** The last complete period before `now`: its id (`daily:YYYY-MM-DD`, `weekly:YYYY-MM-DD`) and span. */
export function lastPeriod(
  kind: "daily" | "weekly",
  now: number,
): { id: string; from: number; to: number; days: number } {
  const today = Math.floor(now / DAY_MS) * DAY_MS;
  if (kind === "daily") {
    const from = today - DAY_MS;
    return { id: `daily:${day(from)}`, from, to: today, days: 1 };
  }
  const weekday = (new Date(today).getUTCDay() + 6) % 7; // Monday 0
  const to = today - weekday * DAY_MS;
  const from = to - 7 * DAY_MS;
  return { id: `weekly:${day(from)}`, from, to, days: 7 };
}

function day(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** An organization's figures over [from, to). */
export async function summaryFigures(
  db: Db,
  orgId: string,
  period: { from: number; to: number; days: number },
): Promise<Record<string, number>> {
  const figures: Record<string, number> = { accepted: 0, delivered: 0, failed: 0 };
  for (const reason of FORM_REFUSAL_REASONS) figures[`refused_${reason}`] = 0;
  for (const form of await listForms(db, orgId)) {
    const outcomes = await countOutcomes(db, form.id, period);
    figures.accepted += outcomes.submissions;
    figures.delivered += outcomes.delivered;
    figures.failed += outcomes.failed;
    const days = await readRefusals(db, form.id, { days: period.days, now: period.to - 1 });
    for (const counts of days) {
      for (const reason of FORM_REFUSAL_REASONS) figures[`refused_${reason}`] += counts[reason];
    }
  }
  // Spam and "sent nowhere" are named as the owner reads them; the rest are refusals.
  figures.spam = figures.refused_spam;
  figures.sentNowhere = figures.refused_nowhere;
  delete figures.refused_spam;
  delete figures.refused_nowhere;
  return figures;
}
