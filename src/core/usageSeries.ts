/**
 * The dashboard's per-day series by model or by key: one series per group, one value per day of
 * the range, for one measure (images or credits spent). The groups with the largest totals get a
 * series each; the rest are summed into one "other" series, so a chart stays readable whatever
 * the number of models or keys while every day's stack still adds up to the day's total.
 */
import type { UsageCounts, UsageDailyRow } from "./usage";

export type SeriesMeasure = Extract<keyof UsageCounts, "images" | "credits_spent">;

export interface GroupSeries {
  /** The model id or key prefix; null for the summed "other" series. */
  group: string | null;
  label: string;
  /** One value per day, in the order of `days`. */
  values: number[];
  total: number;
}

/** How many groups get their own series before the rest are summed into "other". */
export const TOP_SERIES = 5;

/**
 * Series over `days` (every day of the range, in order) from the per-(day, group) rows. Groups
 * whose total is 0 for this measure are left out; ties keep the label order (stable output).
 */
export function groupSeries(days: string[], rows: UsageDailyRow[], measure: SeriesMeasure, otherLabel: string, top = TOP_SERIES): GroupSeries[] {
  const dayIndex = new Map(days.map((d, i) => [d, i]));
  const byGroup = new Map<string, GroupSeries>();
  for (const r of rows) {
    const i = dayIndex.get(r.day);
    if (i === undefined || r[measure] === 0) continue;
    let s = byGroup.get(r.group);
    if (!s) byGroup.set(r.group, (s = { group: r.group, label: r.label, values: days.map(() => 0), total: 0 }));
    s.values[i]! += r[measure];
    s.total += r[measure];
  }
  const ranked = [...byGroup.values()].sort((a, b) => b.total - a.total || a.label.localeCompare(b.label));
  // "Other" only when it would hold two groups or more: one more named series is clearer.
  if (ranked.length <= top + 1) return ranked;
  const rest = ranked.slice(top);
  const other: GroupSeries = { group: null, label: otherLabel, values: days.map((_, i) => rest.reduce((sum, s) => sum + s.values[i]!, 0)), total: rest.reduce((sum, s) => sum + s.total, 0) };
  return [...ranked.slice(0, top), other];
}
