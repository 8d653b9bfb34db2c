/**
 * A user's usage over a range of UTC days, grouped by day, model or API key: what `GET
 * /v1/usage` answers and the usage dashboard draws. The figures come from the request history
 * (one row per request, with its charge and refund), so they equal the ledger's charge and
 * refund rows for the same requests.
 */
import { MAX_USAGE_RANGE_DAYS } from "./limits";
import { DAY_MS, utcDay, utcDayStart } from "./utcDays";

export const USAGE_GROUPS = ["day", "model", "key"] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];

/** The counts of one group (or of the whole range). */
export interface UsageCounts {
  /** Every request, image and chat, whatever its outcome. */
  requests: number;
  /** Image requests (charged ones: refused requests are never recorded). */
  image_requests: number;
  /** Image requests that delivered an image. */
  images: number;
  chat_requests: number;
  succeeded: number;
  /** Failed or interrupted (each refunded). */
  failed: number;
  /** Still running. */
  pending: number;
  credits_charged: number;
  credits_refunded: number;
  /** Charged minus refunded: what the range cost. */
  credits_spent: number;
}

export interface UsageRow extends UsageCounts {
  /** The day (YYYY-MM-DD, UTC), the model id, or the key's prefix ("workbench" for signed-in use without a key). */
  group: string;
  /** A human name: the key's name for group_by=key, else the group itself. */
  label: string;
}

/** One group's counts on one day (the dashboard's per-day series by model or by key). */
export interface UsageDailyRow extends UsageRow {
  /** YYYY-MM-DD, UTC. */
  day: string;
}

export interface UsageRange {
  /** First and last day, inclusive (YYYY-MM-DD, UTC). */
  from: string;
  to: string;
  /** The same range in milliseconds: [fromMs, toMs). */
  fromMs: number;
  toMs: number;
}

/** A query that cannot be answered: 400 with the parameter at fault. */
export class UsageQueryError extends Error {
  override name = "UsageQueryError";
  constructor(message: string, readonly param: string) {
    super(message);
  }
}

export const EMPTY_COUNTS: UsageCounts = {
  requests: 0, image_requests: 0, images: 0, chat_requests: 0, succeeded: 0, failed: 0, pending: 0, credits_charged: 0, credits_refunded: 0, credits_spent: 0,
};

/**
 * The range of a query: `to` defaults to today and `from` to `defaultDays` days ending at `to`;
 * both inclusive; at most MAX_USAGE_RANGE_DAYS days.
 */
export function usageRange(q: { from?: string | undefined; to?: string | undefined }, now: number, defaultDays: number): UsageRange {
  const toStart = q.to === undefined ? utcDayStart(utcDay(now)) : utcDayStart(q.to);
  if (toStart === null) throw new UsageQueryError(`Invalid 'to': expected a date as YYYY-MM-DD (UTC), got '${String(q.to).slice(0, 40)}'.`, "to");
  const fromStart = q.from === undefined ? toStart - (defaultDays - 1) * DAY_MS : utcDayStart(q.from);
  if (fromStart === null) throw new UsageQueryError(`Invalid 'from': expected a date as YYYY-MM-DD (UTC), got '${String(q.from).slice(0, 40)}'.`, "from");
  if (fromStart > toStart) throw new UsageQueryError("Invalid range: 'from' is after 'to'.", "from");
  const days = (toStart - fromStart) / DAY_MS + 1;
  if (days > MAX_USAGE_RANGE_DAYS) throw new UsageQueryError(`The range covers ${days} days; ask for at most ${MAX_USAGE_RANGE_DAYS} days at a time.`, "from");
  return { from: utcDay(fromStart), to: utcDay(toStart), fromMs: fromStart, toMs: toStart + DAY_MS };
}

export function parseUsageGroup(value: string | undefined): UsageGroup {
  if (value === undefined) return "day";
  const group = USAGE_GROUPS.find((g) => g === value);
  if (!group) throw new UsageQueryError(`Invalid 'group_by': expected one of ${USAGE_GROUPS.join(", ")}, got '${value.slice(0, 40)}'.`, "group_by");
  return group;
}

/** Every day of the range, in order, with zeros where nothing happened (charts need the gaps). */
export function fillDays(range: UsageRange, rows: UsageRow[]): UsageRow[] {
  const byDay = new Map(rows.map((r) => [r.group, r]));
  const out: UsageRow[] = [];
  for (let t = range.fromMs; t < range.toMs; t += DAY_MS) {
    const day = utcDay(t);
    out.push(byDay.get(day) ?? { group: day, label: day, ...EMPTY_COUNTS });
  }
  return out;
}

export function totalsOf(rows: UsageCounts[]): UsageCounts {
  const total: UsageCounts = { ...EMPTY_COUNTS };
  for (const r of rows) for (const k of Object.keys(total) as (keyof UsageCounts)[]) total[k] += r[k];
  return total;
}

/** What the usage report needs from storage. */
export interface UsageSource {
  usage(userId: number, range: UsageRange, groupBy: UsageGroup): Promise<UsageRow[]>;
}

/** The report: grouped rows (every day for group_by=day) and their totals. */
export async function usageReport(source: UsageSource, userId: number, range: UsageRange, groupBy: UsageGroup): Promise<{ rows: UsageRow[]; totals: UsageCounts }> {
  const rows = await source.usage(userId, range, groupBy);
  return { rows: groupBy === "day" ? fillDays(range, rows) : rows, totals: totalsOf(rows) };
}
