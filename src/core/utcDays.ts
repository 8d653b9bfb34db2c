/** Calendar days in UTC, as the key expiry and the usage report name them (YYYY-MM-DD). */

export const DAY_MS = 86_400_000;

/** Midnight UTC of a YYYY-MM-DD date, or null when it is not a real date. */
export function utcDayStart(day: string): number | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(day);
  if (!m) return null;
  const t = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return new Date(t).toISOString().slice(0, 10) === day ? t : null;
}

/** The YYYY-MM-DD (UTC) of a time. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}
