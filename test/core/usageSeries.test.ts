/**
 * The usage dashboard's per-day series by model and by key: the store's per-(day, group) counts
 * over charges, successes and refunds made on several days with a fixed clock (the real SQLite
 * store in memory), and the top-N-plus-other series drawn from them: every day's stack adds up
 * to that day's figure, and each group's days add up to its 30-day total.
 */
import { describe, expect, test } from "bun:test";
import { addUser, createKey } from "../../src/core/accounts";
import { fillDays, usageRange, type UsageDailyRow } from "../../src/core/usage";
import { groupSeries } from "../../src/core/usageSeries";
import { DAY_MS, utcDay } from "../../src/core/utcDays";
import { memoryStore } from "../support/memoryStore";

const NOW = Date.UTC(2025, 5, 30, 12);

describe("store: usage per day by model and by key", () => {
  test("each (day, group) counts its own images, failures and credits; the days sum to the group's total", async () => {
    const store = memoryStore();
    const now = () => NOW;
    const user = await addUser(store, now, { email: "daily@example.com", credits: 100 });
    const other = await addUser(store, now, { email: "other@example.com", credits: 100 });
    const a = (await createKey(store, now, user.id, "alpha")).row;
    const b = (await createKey(store, now, user.id, "beta")).row;
    let n = 0;
    /** One image request on a day ago: charged `price`, then succeeded or failed (refunded). */
    const request = async (userId: number, keyId: number | null, model: string, price: number, daysAgo: number, ok: boolean) => {
      const at = NOW - daysAgo * DAY_MS;
      const id = `req-${++n}`;
      await store.credits.chargeForImage({ requestId: id, userId, keyId, kind: "generate", model, price, prompt: "p" }, at);
      if (ok) (await store.requests.markSucceeded(id, { queueMs: 0, generationMs: 1 }, at + 1));
      else (await store.credits.refundOnce(id, { status: "failed", errorCode: "upstream_error", errorMessage: "no" }, at + 1));
    };
    await request(user.id, a.id, "m/cheap", 1, 0, true);
    await request(user.id, a.id, "m/cheap", 1, 0, true);
    await request(user.id, b.id, "m/dear", 3, 0, true);
    await request(user.id, b.id, "m/dear", 3, 0, false);
    await request(user.id, null, "m/cheap", 1, 2, true);
    await request(user.id, a.id, "m/dear", 3, 2, true);
    await request(user.id, a.id, "m/cheap", 1, 40, true); // outside the 30 days
    await request(other.id, null, "m/cheap", 1, 0, true); // someone else's

    const range = usageRange({}, NOW, 30);
    const today = utcDay(NOW);
    const twoDaysAgo = utcDay(NOW - 2 * DAY_MS);
    const pick = (rows: UsageDailyRow[]) => rows.map((r) => [r.day, r.group, r.images, r.failed, r.credits_spent]);

    expect(pick(await store.usage.usageDaily(user.id, range, "model"))).toEqual([
      [twoDaysAgo, "m/cheap", 1, 0, 1],
      [twoDaysAgo, "m/dear", 1, 0, 3],
      [today, "m/cheap", 2, 0, 2],
      [today, "m/dear", 1, 1, 3],
    ]);
    const byKey = await store.usage.usageDaily(user.id, range, "key");
    expect(pick(byKey).sort()).toEqual(
      [
        [twoDaysAgo, a.prefix, 1, 0, 3],
        [twoDaysAgo, "workbench", 1, 0, 1],
        [today, a.prefix, 2, 0, 2],
        [today, b.prefix, 1, 1, 3],
      ].sort(),
    );
    expect(byKey.find((r) => r.group === b.prefix)!.label).toBe("beta");

    // Summed over the days, each group equals the 30-day breakdown; the days equal the daily report.
    for (const by of ["model", "key"] as const) {
      const daily = await store.usage.usageDaily(user.id, range, by);
      for (const g of await store.usage.usage(user.id, range, by)) {
        const mine = daily.filter((r) => r.group === g.group);
        expect([g.images, g.failed, g.credits_spent]).toEqual([
          mine.reduce((s, r) => s + r.images, 0),
          mine.reduce((s, r) => s + r.failed, 0),
          mine.reduce((s, r) => s + r.credits_spent, 0),
        ]);
      }
      const days = fillDays(range, await store.usage.usage(user.id, range, "day"));
      for (const d of days) expect(daily.filter((r) => r.day === d.group).reduce((s, r) => s + r.credits_spent, 0)).toBe(d.credits_spent);
    }
  });
});

describe("groupSeries: top groups and other", () => {
  const days = ["2025-06-28", "2025-06-29", "2025-06-30"];
  const row = (day: string, group: string, images: number): UsageDailyRow => ({
    day, group, label: group, images, credits_spent: images * 2,
    requests: images, image_requests: images, chat_requests: 0, succeeded: images, failed: 0, pending: 0, credits_charged: images * 2, credits_refunded: 0,
  });

  test("one series per group, a value per day, zeros where nothing happened; groups without the measure left out", () => {
    const s = groupSeries(days, [row("2025-06-28", "a", 1), row("2025-06-30", "a", 4), row("2025-06-29", "b", 7), row("2025-06-29", "chat-only", 0)], "images", "Other");
    expect(s).toEqual([
      { group: "a", label: "a", values: [1, 0, 4], total: 5 },
      { group: "b", label: "b", values: [0, 7, 0], total: 7 },
    ].sort((x, y) => y.total - x.total));
    expect(groupSeries(days, [row("2025-06-28", "a", 1)], "credits_spent", "Other")[0]!.values).toEqual([2, 0, 0]);
  });

  test("beyond the top N the rest is one 'other' series, and every day's stack keeps its total", () => {
    const rows = ["g1", "g2", "g3", "g4"].flatMap((g, i) => days.map((d, j) => row(d, g, (i + 1) * (j + 1))));
    const s = groupSeries(days, rows, "images", "Other", 2);
    expect(s.map((x) => x.label)).toEqual(["g4", "g3", "Other"]);
    expect(s[2]).toEqual({ group: null, label: "Other", values: [3, 6, 9], total: 18 });
    for (let i = 0; i < days.length; i++) {
      expect(s.reduce((sum, x) => sum + x.values[i]!, 0)).toBe(rows.filter((r) => r.day === days[i]).reduce((sum, r) => sum + r.images, 0));
    }
    // One group over the top is named, not hidden in an "other" of one.
    expect(groupSeries(days, rows, "images", "Other", 3).map((x) => x.label)).toEqual(["g4", "g3", "g2", "g1"]);
  });
});
