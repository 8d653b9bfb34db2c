/** The webhook retry schedule: the spec's example cut after about a day, with bounded jitter. */
import { describe, expect, test } from "bun:test";
import { DEFAULT_RETRY_DELAYS_MS, RETRY_JITTER, nextAttemptAt, totalAttempts } from "../../src/core/webhooksSchedule";
import { loadConfig } from "../../src/config";

describe("retry schedule", () => {
  test("at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight attempts over about a day", () => {
    expect(DEFAULT_RETRY_DELAYS_MS).toEqual([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]);
    expect(totalAttempts(DEFAULT_RETRY_DELAYS_MS)).toBe(8);
    const span = DEFAULT_RETRY_DELAYS_MS.reduce((a, b) => a + b, 0);
    expect(span / 3_600_000).toBeCloseTo(27.58, 1);
    // The config's default is this schedule.
    expect(loadConfig({ env: {} }).webhooks.retry_delays_ms).toEqual([...DEFAULT_RETRY_DELAYS_MS]);
  });

  test("the next attempt follows the failed one by its delay, plus at most 10% jitter; then none", () => {
    const now = 1_000_000;
    const noJitter = () => 0;
    const fullJitter = () => 1;
    DEFAULT_RETRY_DELAYS_MS.forEach((delay, i) => {
      expect(nextAttemptAt(now, i + 1, DEFAULT_RETRY_DELAYS_MS, noJitter)).toBe(now + delay);
      expect(nextAttemptAt(now, i + 1, DEFAULT_RETRY_DELAYS_MS, fullJitter)).toBe(now + Math.round(delay * (1 + RETRY_JITTER)));
    });
    expect(nextAttemptAt(now, 8, DEFAULT_RETRY_DELAYS_MS)).toBeNull();
    expect(nextAttemptAt(now, 1, [])).toBeNull();
    for (let i = 0; i < 200; i++) {
      const t = nextAttemptAt(now, 2, DEFAULT_RETRY_DELAYS_MS)!;
      expect(t).toBeGreaterThanOrEqual(now + 300_000);
      expect(t).toBeLessThanOrEqual(now + 330_000);
    }
    expect(() => nextAttemptAt(now, 0, DEFAULT_RETRY_DELAYS_MS)).toThrow(RangeError);
  });
});
