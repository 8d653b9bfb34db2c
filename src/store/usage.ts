/** The usage report's one grouped query over the request history (see core/usage). */
import type { Db } from "./database";
import type { UsageDailyRow, UsageGroup, UsageRange, UsageRow, UsageSource } from "../core/usage";

/** Requests without a key (the signed-in workbench) form their own group under this name. */
export const WORKBENCH_GROUP = "workbench";

const COUNTS = `COUNT(*) AS requests,
  SUM(r.kind = 'image') AS image_requests,
  SUM(r.kind = 'image' AND r.status = 'succeeded') AS images,
  SUM(r.kind = 'chat') AS chat_requests,
  SUM(r.status = 'succeeded') AS succeeded,
  SUM(r.status IN ('failed', 'interrupted')) AS failed,
  SUM(r.status = 'pending') AS pending,
  SUM(r.credits_charged) AS credits_charged,
  SUM(r.credits_refunded) AS credits_refunded,
  SUM(r.credits_charged - r.credits_refunded) AS credits_spent`;

const DAY = "strftime('%Y-%m-%d', r.created_at / 1000, 'unixepoch')";

const GROUPS: Record<UsageGroup, { select: string; by: string; join: string }> = {
  day: { select: `${DAY} AS grp, NULL AS name`, by: "grp", join: "" },
  model: { select: "r.model AS grp, NULL AS name", by: "r.model", join: "" },
  key: { select: `COALESCE(k.prefix, '${WORKBENCH_GROUP}') AS grp, k.name AS name`, by: "r.key_id", join: "LEFT JOIN api_keys k ON k.id = r.key_id" },
};

export class UsageStore implements UsageSource {
  constructor(
    private readonly db: Db,
    /** Writes the queued chat rows first (store/requests batches them), so the report counts them. */
    private readonly flushQueued: () => void = () => {},
  ) {}

  /** One user's requests in [fromMs, toMs), grouped; uses the requests_user_time index. */
  usage(userId: number, range: UsageRange, groupBy: UsageGroup): UsageRow[] {
    const g = GROUPS[groupBy];
    this.flushQueued();
    const rows = this.db
      .query<Omit<UsageRow, "group" | "label"> & { grp: string; name: string | null }, [number, number, number]>(
        `SELECT ${g.select}, ${COUNTS} FROM requests r ${g.join}
          WHERE r.user_id = ? AND r.created_at >= ? AND r.created_at < ? GROUP BY ${g.by} ORDER BY grp`,
      )
      .all(userId, range.fromMs, range.toMs);
    return rows.map(({ grp, name, ...counts }) => ({ group: grp, label: name ?? (grp === WORKBENCH_GROUP && groupBy === "key" ? "Workbench (signed in)" : grp), ...counts }));
  }

  /**
   * The same counts per (day, model) or per (day, key): the dashboard's daily series by model
   * and by key. Summed over the days, each group equals its row of usage(…, groupBy).
   */
  usageDaily(userId: number, range: UsageRange, groupBy: "model" | "key"): UsageDailyRow[] {
    const g = GROUPS[groupBy];
    this.flushQueued();
    const rows = this.db
      .query<Omit<UsageRow, "group" | "label"> & { day: string; grp: string; name: string | null }, [number, number, number]>(
        `SELECT ${DAY} AS day, ${g.select}, ${COUNTS} FROM requests r ${g.join}
          WHERE r.user_id = ? AND r.created_at >= ? AND r.created_at < ? GROUP BY day, ${g.by} ORDER BY day, grp`,
      )
      .all(userId, range.fromMs, range.toMs);
    return rows.map(({ day, grp, name, ...counts }) => ({ day, group: grp, label: name ?? grp, ...counts }));
  }
}
