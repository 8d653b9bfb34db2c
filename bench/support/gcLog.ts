/**
 * What JavaScriptCore's collector did, from the log a Bun process writes to stderr when started
 * with BUN_JSC_logGC=1: collections by kind, the heap left after each, and the pauses.
 */

export interface GcSummary {
  eden: number;
  full: number;
  /** Mean growth of the heap across one young-generation collection: what it promoted, in MB. */
  edenGrowthMb: number;
  /** Mean heap size after a full collection, in MB (what the process really keeps). */
  heapAfterFullMb: number;
  /** Every pause of the collector summed, in ms. */
  pausesMs: number;
}

/** A summary of the collections that ended in `log` (the first `skip` are left out: start-up). */
export function summarizeGcLog(log: string, skip = 0): GcSummary {
  const ends = [...log.matchAll(/START M \d+kb => (Eden|Full)Collection[\s\S]*?=> (\d+)kb, p=[\d.]+ms \(max [\d.]+\), cycle [\d.]+ms END/g)]
    .map((m) => ({ kind: m[1]!, afterKb: Number(m[2]) }))
    .slice(skip);
  const growth: number[] = [];
  for (let i = 1; i < ends.length; i++) if (ends[i]!.kind === "Eden") growth.push(ends[i]!.afterKb - ends[i - 1]!.afterKb);
  const fulls = ends.filter((e) => e.kind === "Full");
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  return {
    eden: ends.length - fulls.length,
    full: fulls.length,
    edenGrowthMb: mean(growth) / 1024,
    heapAfterFullMb: mean(fulls.map((f) => f.afterKb)) / 1024,
    pausesMs: [...log.matchAll(/ p=([\d.]+)ms/g)].reduce((s, m) => s + Number(m[1]), 0),
  };
}

export function formatGc(g: GcSummary): string {
  return `${g.eden} young + ${g.full} full collections, ${g.edenGrowthMb.toFixed(2)} MB promoted per young one, ${g.heapAfterFullMb.toFixed(1)} MB after a full one, ${g.pausesMs.toFixed(0)} ms of pauses`;
}
