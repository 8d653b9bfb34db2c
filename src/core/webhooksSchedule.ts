/**
 * When a failed webhook delivery is tried again: the Standard Webhooks example schedule, cut
 * after about a day. An attempt counts as delivered only on a 2xx answer; everything else
 * (another status, a redirect, no answer in time, a refused address) is retried here until the
 * schedule runs out, then the delivery is failed. A 410 Gone ends it at once (the receiver
 * says it wants no more).
 *
 *   attempt  1  at once
 *   attempt  2  5 s after the first failure
 *   attempt  3  5 min later
 *   attempt  4  30 min later
 *   attempt  5  2 h later
 *   attempt  6  5 h later
 *   attempt  7  10 h later
 *   attempt  8  10 h later: about 27.5 h after the event, then no more
 *
 * Each delay gets up to 10% of random extra time, so receivers that failed together are not all
 * retried in the same instant (the spec recommends jitter).
 */

/** The delay after each failed attempt, in order; one more attempt than entries. */
export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];

/** Upper bound of the random extra time, as a fraction of the delay. */
export const RETRY_JITTER = 0.1;

/** Attempts a delivery gets in all with this schedule. */
export function totalAttempts(delaysMs: readonly number[]): number {
  return delaysMs.length + 1;
}

/**
 * When to try again after `attemptsMade` attempts (1-based count, the last one failed), or null
 * when the schedule is used up.
 */
export function nextAttemptAt(now: number, attemptsMade: number, delaysMs: readonly number[], random: () => number = Math.random): number | null {
  if (!Number.isInteger(attemptsMade) || attemptsMade < 1) throw new RangeError("attemptsMade counts from 1");
  const delay = delaysMs[attemptsMade - 1];
  if (delay === undefined) return null;
  return now + Math.round(delay * (1 + RETRY_JITTER * Math.min(1, Math.max(0, random()))));
}
