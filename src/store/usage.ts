/** The usage report's one grouped query over the request history (see core/usage). */
import type { SqlClient } from "./sql";
import type { UsageDailyRow, UsageGroup, UsageRange, UsageRow, UsageSource } from "../core/usage";
import { DAY_MS, utcDay } from "../core/utcDays";

/** Requests without a key (the signed-in workbench) form their own group under this name. */
export const WORKBENCH_GROUP = "workbench";

// COUNT … FILTER and CAST(SUM … AS BIGINT): integers on both engines (PostgreSQL sums into numeric).
const COUNTS = `CAST(COUNT(*) AS BIGINT) AS requests,
  CAST(COUNT(*) FILTER (WHERE r.kind = 'image') AS BIGINT) AS image_requests,
  CAST(COUNT(*) FILTER (WHERE r.kind = 'image' AND r.status = 'succeeded') AS BIGINT) AS images,
  CAST(COUNT(*) FILTER (WHERE r.kind = 'chat') AS BIGINT) AS chat_requests,
  CAST(COUNT(*) FILTER (WHERE r.status = 'succeeded') AS BIGINT) AS succeeded,
  CAST(COUNT(*) FILTER (WHERE r.status IN ('failed', 'interrupted')) AS BIGINT) AS failed,
  CAST(COUNT(*) FILTER (WHERE r.status = 'pending') AS BIGINT) AS pending,
  CAST(SUM(r.credits_charged) AS BIGINT) AS credits_charged,
  CAST(SUM(r.credits_refunded) AS BIGINT) AS credits_refunded,
  CAST(SUM(r.credits_charged - r.credits_refunded) AS BIGINT) AS credits_spent`;

/**
 * The UTC day of a request as whole days since the range's first midnight (its one parameter):
 * integer arithmetic both engines agree on, where a date function would differ per engine.
 * The range starts at a UTC midnight and rows start at or after it, so the quotient is the day.
 */
const DAY_INDEX = `CAST((r.created_at - ?) / ${DAY_MS} AS INTEGER)`;

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

  /** One user's requests in [fromMs, toMs), grouped, ordered by group; uses the requests_user_time index. */
  async usage(userId: number, range: UsageRange, groupBy: UsageGroup): Promise<UsageRow[]> {
    const g = GROUPS[groupBy];
    await this.flushQueued();
    const rows = await this.sql.all<Counts & { grp: string | number; name: string | null }>(
      `SELECT ${g.select}, ${COUNTS} FROM requests r ${g.join}
        WHERE r.user_id = ? AND r.created_at >= ? AND r.created_at < ? GROUP BY ${g.by}`,
      [...(g.dayParam ? [range.fromMs] : []), userId, range.fromMs, range.toMs],
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
    const rows = await this.sql.all<Counts & { day: number; grp: string; name: string | null }>(
      `SELECT ${DAY_INDEX} AS day, ${g.select}, ${COUNTS} FROM requests r ${g.join}
        WHERE r.user_id = ? AND r.created_at >= ? AND r.created_at < ? GROUP BY day, ${g.by}`,
      [range.fromMs, userId, range.fromMs, range.toMs],
    );
    const out = rows.map(({ day, grp, name, ...counts }) => ({ day: dayOf(range, Number(day)), group: grp, label: name ?? grp, ...counts }));
    return out.sort((a, b) => byText(a.day, b.day) || byText(a.group, b.group));
  }
}

function dayOf(range: UsageRange, index: number): string {
  return utcDay(range.fromMs + index * DAY_MS);
}
