/** The usage report's one grouped query over the request history (see core/usage). */
import type { SqlClient } from "./sql";
import type { UsageDailyRow, UsageGroup, UsageRange, UsageRow, UsageSource } from "../core/usage";
import { DAY_MS, utcDay } from "../core/utcDays";

/** Requests without a key (the signed-in workbench) form their own group under this name. */
export const WORKBENCH_GROUP = "workbench";

/**
 * A user's requests in [fromMs, toMs) at the grain of (UTC day, model, key), from two places:
 * image rows read live from an index of image rows only (they change: pending, then finished or
 * refunded, and each one cost credits), and chat from chat_usage, where the batch that writes
 * chat rows adds their counts (migration 16: a chat row never changes once written). So a
 * report reads its range's image rows and a few chat rows per day, not every chat request.
 * Its parameters: user, fromMs, toMs (the image rows), user, first day, day after the last.
 * COUNT … FILTER and CAST(SUM … AS BIGINT): integers on both engines (PostgreSQL sums into numeric).
 */
const SOURCE = `(
  SELECT created_at / ${DAY_MS} AS day, model, key_id,
         COUNT(*) AS requests, COUNT(*) AS image_requests, COUNT(*) FILTER (WHERE status = 'succeeded') AS images, 0 AS chat_requests,
         COUNT(*) FILTER (WHERE status = 'succeeded') AS succeeded, COUNT(*) FILTER (WHERE status IN ('failed', 'interrupted')) AS failed,
         COUNT(*) FILTER (WHERE status = 'pending') AS pending, SUM(credits_charged) AS credits_charged, SUM(credits_refunded) AS credits_refunded
    FROM requests WHERE user_id = ? AND kind = 'image' AND created_at >= ? AND created_at < ?
   GROUP BY created_at / ${DAY_MS}, model, key_id
  UNION ALL
  SELECT day, model, NULLIF(key_id, 0), requests, 0, 0, requests, succeeded, failed, requests - succeeded - failed, 0, 0
    FROM chat_usage WHERE user_id = ? AND day >= ? AND day < ?
) r`;

function sourceParams(userId: number, range: UsageRange): number[] {
  return [userId, range.fromMs, range.toMs, userId, range.fromMs / DAY_MS, range.toMs / DAY_MS];
}

const COUNTS = `CAST(SUM(r.requests) AS BIGINT) AS requests,
  CAST(SUM(r.image_requests) AS BIGINT) AS image_requests,
  CAST(SUM(r.images) AS BIGINT) AS images,
  CAST(SUM(r.chat_requests) AS BIGINT) AS chat_requests,
  CAST(SUM(r.succeeded) AS BIGINT) AS succeeded,
  CAST(SUM(r.failed) AS BIGINT) AS failed,
  CAST(SUM(r.pending) AS BIGINT) AS pending,
  CAST(SUM(r.credits_charged) AS BIGINT) AS credits_charged,
  CAST(SUM(r.credits_refunded) AS BIGINT) AS credits_refunded,
  CAST(SUM(r.credits_charged - r.credits_refunded) AS BIGINT) AS credits_spent`;

/** A row's day as whole days since the range's first day (its one parameter, the first day's number). */
const DAY_INDEX = "r.day - ?";

type Counts = Omit<UsageRow, "group" | "label">;

/**
 * What each grouping selects (`grp`, `name`) and groups by. Key rows group by the key's id and
 * carry its prefix and name (one key: one prefix and name). The day's parameter comes first.
 */
const GROUPS: Record<UsageGroup, { select: string; by: string; join: string; dayParam: boolean }> = {
  day: { select: `${DAY_INDEX} AS grp, NULL AS name`, by: "grp", join: "", dayParam: true },
  model: { select: "r.model AS grp, NULL AS name", by: "r.model", join: "", dayParam: false },
  key: {
    select: `COALESCE(k.prefix, '${WORKBENCH_GROUP}') AS grp, k.name AS name`,
    by: "r.key_id, k.prefix, k.name",
    join: "LEFT JOIN api_keys k ON k.id = r.key_id",
    dayParam: false,
  },
};

/** Code-unit order, the same whatever collation the database has (PostgreSQL's may be a locale's). */
const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

export class UsageStore implements UsageSource {
  constructor(
    private readonly sql: SqlClient,
    /** Writes the queued chat rows first (store/requests batches them), so the report counts them. */
    private readonly flushQueued: () => unknown = () => undefined,
  ) {}

  /** One user's requests in [fromMs, toMs), grouped, ordered by group (see SOURCE). */
  async usage(userId: number, range: UsageRange, groupBy: UsageGroup): Promise<UsageRow[]> {
    const g = GROUPS[groupBy];
    await this.flushQueued();
    const rows = await this.sql.all<Counts & { grp: string | number; name: string | null }>(
      `SELECT ${g.select}, ${COUNTS} FROM ${SOURCE} ${g.join} GROUP BY ${g.by}`,
      [...(g.dayParam ? [range.fromMs / DAY_MS] : []), ...sourceParams(userId, range)],
    );
    const out = rows.map(({ grp, name, ...counts }) => {
      const group = groupBy === "day" ? dayOf(range, Number(grp)) : String(grp);
      return { group, label: name ?? (group === WORKBENCH_GROUP && groupBy === "key" ? "Workbench (signed in)" : group), ...counts };
    });
    return out.sort((a, b) => byText(a.group, b.group));
  }

  /**
   * The same counts per (day, model) or per (day, key): the dashboard's daily series by model
   * and by key. Summed over the days, each group equals its row of usage(…, groupBy).
   */
  async usageDaily(userId: number, range: UsageRange, groupBy: "model" | "key"): Promise<UsageDailyRow[]> {
    const g = GROUPS[groupBy];
    await this.flushQueued();
    // day_index: not a column of the source, which PostgreSQL's GROUP BY would take first.
    const rows = await this.sql.all<Counts & { day_index: number; grp: string; name: string | null }>(
      `SELECT ${DAY_INDEX} AS day_index, ${g.select}, ${COUNTS} FROM ${SOURCE} ${g.join} GROUP BY day_index, ${g.by}`,
      [range.fromMs / DAY_MS, ...sourceParams(userId, range)],
    );
    const out = rows.map(({ day_index, grp, name, ...counts }) => ({ day: dayOf(range, Number(day_index)), group: grp, label: name ?? grp, ...counts }));
    return out.sort((a, b) => byText(a.day, b.day) || byText(a.group, b.group));
  }
}

function dayOf(range: UsageRange, index: number): string {
  return utcDay(range.fromMs + index * DAY_MS);
}
