/**
 * Charts drawn on the server as SVG (no script, no CDN): bars per day and horizontal bars per
 * group. Colours come from the stylesheet's classes (series-0, series-1), so the dark scheme
 * applies and the strict CSP (no inline styles) holds. Every bar has a <title> for its figure,
 * and the chart an accessible name; the page shows the same figures in a table.
 */
import { html, type Html } from "./html";

export interface Series {
  label: string;
  /** One value per bar, in order. */
  values: number[];
  /** The colour class; series-<index> when absent (series-0 accent, series-1 danger). */
  colour?: string;
}

/** Colour classes for series that are groups (models, keys), not outcomes: no red for "failed". */
export function groupColour(index: number, isOther: boolean): string {
  return isOther ? "group-other" : `group-${index}`;
}

const W = 600;
const H = 160;

/** A round upper bound for the axis: 1, 2, 5 × 10^n (at least 2, so the middle line is a whole number). */
function niceMax(max: number): number {
  if (max <= 2) return 2;
  const p = 10 ** Math.floor(Math.log10(max));
  return [2, 4, 10].map((m) => m * p).find((v) => v >= max) ?? 10 * p;
}

/**
 * Stacked bars, one per label (days), the series stacked bottom up. The SVG holds only shapes
 * and stretches to the width; the axis labels are HTML, so they keep their size on a phone.
 * Day labels are thinned to about six, counted back from the last day.
 */
export function stackedBars(o: { title: string; labels: string[]; series: Series[]; testId?: string; unit?: string }): Html {
  const n = o.labels.length;
  const totals = o.labels.map((_, i) => o.series.reduce((s, x) => s + (x.values[i] ?? 0), 0));
  const max = niceMax(Math.max(0, ...totals));
  const slot = W / Math.max(1, n);
  const barW = Math.max(1, slot * 0.7);
  const y = (v: number) => H - (v / max) * H;
  const every = Math.max(1, Math.ceil(n / 6));
  const bars = o.labels.map((label, i) => {
    let base = 0;
    const x = i * slot + (slot - barW) / 2;
    return o.series.map((s, k) => {
      const v = s.values[i] ?? 0;
      if (v === 0) return html``;
      // With a unit the series are groups: "day · group: 3 images"; without, the series is the unit.
      const title = o.unit === undefined ? html`${label}: ${v} ${s.label}` : html`${label} · ${s.label}: ${v} ${o.unit}`;
      const rect = html`<rect class="${s.colour ?? `series-${k}`}" x="${x.toFixed(1)}" y="${y(base + v).toFixed(1)}" width="${barW.toFixed(1)}" height="${(y(base) - y(base + v)).toFixed(1)}"><title>${title}</title></rect>`;
      base += v;
      return rect;
    });
  });
  const grid = [0, max / 2, max].map((t) => html`<line x1="0" x2="${W}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" vector-effect="non-scaling-stroke"></line>`);
  return html`<figure class="chart"${o.testId ? html` data-testid="${o.testId}"` : ""}>
  <div class="chart-plot">
    <div class="y-axis" aria-hidden="true"><span>${max}</span><span>${max / 2}</span><span>0</span></div>
    <svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="${o.title}" class="bars"><g class="grid">${grid}</g>${bars}</svg>
  </div>
  <div class="x-axis" aria-hidden="true">${o.labels.map((label, i) => html`<span>${(n - 1 - i) % every === 0 ? label.slice(5) : ""}</span>`)}</div>
  <figcaption>${legend(o.series)}</figcaption>
</figure>`;
}

/** Horizontal bars, one per row (a model or a key), for one figure each. */
export function horizontalBars(o: { title: string; rows: { label: string; value: number }[]; unit: string; testId?: string }): Html {
  const max = Math.max(1, ...o.rows.map((r) => r.value));
  return html`<ul class="hbars" aria-label="${o.title}"${o.testId ? html` data-testid="${o.testId}"` : ""}>${o.rows.map(
    (r) => html`<li><span class="hbar-label">${r.label}</span><svg viewBox="0 0 100 10" preserveAspectRatio="none" class="hbar" aria-hidden="true"><rect class="series-0" x="0" y="0" height="10" width="${((r.value / max) * 100).toFixed(2)}"></rect></svg><span class="hbar-value">${r.value} ${o.unit}</span></li>`,
  )}</ul>`;
}

function legend(series: Series[]): Html {
  return html`<ul class="legend">${series.map((s, k) => html`<li><svg viewBox="0 0 10 10" class="swatch" aria-hidden="true"><rect class="${s.colour ?? `series-${k}`}" width="10" height="10"></rect></svg>${s.label}</li>`)}</ul>`;
}
