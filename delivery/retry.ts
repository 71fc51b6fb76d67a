/** Longest wait a receiver's Retry-After may impose. */
export const MAX_RETRY_AFTER_MS = 24 * 3600 * 1000;

/**
 * The wait before the next attempt after `attempts` failed ones, or null when the
 * schedule is exhausted. The schedule's delay gets ±20 % jitter so that retries of
 * many jobs spread out; a receiver's Retry-After wins when it asks for longer.
 */
export function nextRetryDelay(
  attempts: number,
  options: { scheduleMs: number[]; retryAfterMs?: number },
): number | null {
  if (attempts > options.scheduleMs.length) return null;
  const base = options.scheduleMs[attempts - 1];
  const jitter = 1 + (Math.random() * 0.4 - 0.2);
  const delay = Math.round(base * jitter);
  const asked = Math.min(options.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS);
  return Math.max(delay, asked);
}
