/**
 * setTimeout and setInterval take their delay as a signed 32-bit count of milliseconds: a
 * longer one (past about 24.8 days) is not "much later" but 1 ms, with a TimeoutOverflowWarning,
 * so a deadline fires at once and a periodic job spins. Configured durations are bounded by the
 * schema (src/config.ts); a delay computed from them (a rate, a sum, seconds × 1000) goes through
 * timerDelay.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `ms` as a delay the timers keep: never negative, at most MAX_TIMER_MS. A timer cut short
 * that way fires after 24.8 days instead of at once: a periodic job runs that often, a wait
 * ends then (no request waits that long), and the shared deadline timer (timerQueue) re-arms
 * for whatever is not due yet.
 */
export function timerDelay(ms: number): number {
  return Math.min(Math.max(0, ms), MAX_TIMER_MS);
}
