/**
 * The usage dashboard: images and credits per day over the last 30 days (server-drawn SVG),
 * the same window by model and by key with success and failure rates, and the history's CSV
 * export. The figures are core/usage's, the ones GET /v1/usage answers.
 */
import type { UsageCounts, UsageDailyRow, UsageRange, UsageRow } from "../../core/usage";
import { groupSeries, type SeriesMeasure } from "../../core/usageSeries";
import { groupColour, horizontalBars, stackedBars } from "../charts";
import { html, type Html } from "../html";
import type { Translator } from "../i18n";
import { page, type Viewer } from "../layout";
import { creditsTabs } from "./credits";
import { WORKBENCH_GROUP } from "../../store/usage";
import { USAGE_DASHBOARD_DAYS } from "../../core/limits";

export interface UsagePageState {
  range: UsageRange;
  days: UsageRow[];
  models: UsageRow[];
  keys: UsageRow[];
  /** Per (day, model) and per (day, key): the daily series by model and by key. */
  modelDays: UsageDailyRow[];
  keyDays: UsageDailyRow[];
  totals: UsageCounts;
}

/** Succeeded out of finished (pending ones are not decided yet); "—" when none finished. */
export function successRate(c: UsageCounts): string {
  const finished = c.succeeded + c.failed;
  return finished === 0 ? "—" : `${Math.round((c.succeeded / finished) * 1000) / 10}%`;
}

function failureRate(c: UsageCounts): string {
  const finished = c.succeeded + c.failed;
  return finished === 0 ? "—" : `${Math.round((c.failed / finished) * 1000) / 10}%`;
}

function breakdown(t: Translator, by: "model" | "key", rows: UsageRow[], testId: string): Html {
  if (rows.length === 0) return html`<p class="muted">${t("usage.empty")}</p>`;
  // The signed-in workbench's group has no key: named in the viewer's language.
  const label = (r: UsageRow) => (by === "key" && r.group === WORKBENCH_GROUP ? t("usage.workbenchKey") : r.label);
  const title = t(by === "model" ? "usage.byModel" : "usage.byKey");
  return html`${horizontalBars({ title: t("usage.bars.images", { title }), rows: rows.map((r) => ({ label: label(r), value: r.images })), unit: t("usage.series.images"), testId: `${testId}-bars` })}
<div class="table-wrap"><table class="usage" data-testid="${testId}">
  <thead><tr><th scope="col">${t(by === "model" ? "usage.col.model" : "usage.col.key")}</th><th scope="col" class="num">${t("usage.col.requests")}</th><th scope="col" class="num">${t("usage.col.images")}</th><th scope="col" class="num">${t("usage.col.failed")}</th><th scope="col" class="num">${t("usage.col.success")}</th><th scope="col" class="num">${t("usage.col.credits")}</th></tr></thead>
  <tbody>${rows.map(
    (r) => html`<tr>
    <td class="name${by === "model" ? " mono" : ""}">${label(r)}</td>
    <td class="num">${r.requests}</td>
    <td class="num">${r.images}</td>
    <td class="num">${r.failed}</td>
    <td class="num">${successRate(r)}</td>
    <td class="num">${r.credits_spent}</td>
  </tr>`,
  )}</tbody>
</table></div>`;
}

/**
 * Images and credits per day by model or by key: a stacked bar per day, the top groups each a
 * colour and the rest as "other"; then every (day, group) row as a table, for screen readers and
 * for figures the chart rounds away.
 */
function dailyBreakdown(t: Translator, by: "model" | "key", days: string[], rows: UsageDailyRow[], testId: string): Html {
  if (rows.length === 0) return html``;
  const name = (r: { group: string; label: string }) => (by === "key" && r.group === WORKBENCH_GROUP ? t("usage.workbenchKey") : r.label);
  const named = rows.map((r) => ({ ...r, label: name(r) }));
  const title = t(by === "model" ? "usage.byModel" : "usage.byKey");
  const chart = (measure: SeriesMeasure, heading: string, chartTitle: string, unit: string) => {
    const series = groupSeries(days, named, measure, t("usage.daily.other"));
    if (series.length === 0) return html``;
    return html`<h3>${heading}</h3>
  ${stackedBars({ title: chartTitle, labels: days, unit, series: series.map((s, k) => ({ label: s.label, values: s.values, colour: groupColour(k, s.group === null) })), testId: `${testId}-${measure === "images" ? "images" : "credits"}` })}`;
  };
  const active = named.filter((r) => r.requests > 0);
  return html`${chart("images", t("usage.chart.images.heading"), t("usage.daily.images.title", { title, days: USAGE_DASHBOARD_DAYS }), t("usage.series.images"))}
${chart("credits_spent", t("usage.chart.credits.heading"), t("usage.daily.credits.title", { title, days: USAGE_DASHBOARD_DAYS }), t("usage.series.credits"))}
<details class="daily-table"><summary>${t("usage.daily.table", { title })}</summary>
<div class="table-wrap"><table class="usage" data-testid="${testId}">
  <thead><tr><th scope="col">${t("usage.col.day")}</th><th scope="col">${t(by === "model" ? "usage.col.model" : "usage.col.key")}</th><th scope="col" class="num">${t("usage.col.images")}</th><th scope="col" class="num">${t("usage.col.failed")}</th><th scope="col" class="num">${t("usage.col.credits")}</th></tr></thead>
  <tbody>${active.map(
    (r) => html`<tr><td class="nowrap">${r.day}</td><td class="name${by === "model" ? " mono" : ""}">${r.label}</td><td class="num">${r.images}</td><td class="num">${r.failed}</td><td class="num">${r.credits_spent}</td></tr>`,
  )}</tbody>
</table></div>
</details>`;
}

export function usagePage(v: Viewer, s: UsagePageState): Html {
  const t = v.t;
  const labels = s.days.map((d) => d.group);
  const total = s.totals;
  return page({
    title: t("usage.title"),
    section: "credits",
    viewer: v,
    body: html`<h1>${t("history.credits.title")}</h1>
${creditsTabs(t, "usage")}
<p class="muted">${t.html("usage.range", { from: s.range.from, to: s.range.to })}</p>
<section class="card">
  <dl class="stats" data-testid="usage-totals">
    <div><dt>${t("usage.total.images")}</dt><dd data-testid="total-images">${total.images}</dd></div>
    <div><dt>${t("usage.total.credits")}</dt><dd data-testid="total-credits">${total.credits_spent}</dd></div>
    <div><dt>${t("usage.total.requests")}</dt><dd>${total.requests}</dd></div>
    <div><dt>${t("usage.total.success")}</dt><dd data-testid="success-rate">${successRate(total)}</dd></div>
    <div><dt>${t("usage.total.failure")}</dt><dd data-testid="failure-rate">${failureRate(total)}</dd></div>
  </dl>
</section>
<section class="card">
  <h2>${t("usage.chart.images.heading")}</h2>
  ${stackedBars({ title: t("usage.chart.images.title", { days: USAGE_DASHBOARD_DAYS }), labels, series: [{ label: t("usage.series.images"), values: s.days.map((d) => d.images) }, { label: t("usage.series.failed"), values: s.days.map((d) => d.failed) }], testId: "chart-images" })}
</section>
<section class="card">
  <h2>${t("usage.chart.credits.heading")}</h2>
  ${stackedBars({ title: t("usage.chart.credits.title", { days: USAGE_DASHBOARD_DAYS }), labels, series: [{ label: t("usage.series.credits"), values: s.days.map((d) => d.credits_spent) }], testId: "chart-credits" })}
</section>
<section class="card">
  <h2>${t("usage.byModel")}</h2>
  ${breakdown(t, "model", s.models, "usage-models")}
  ${dailyBreakdown(t, "model", labels, s.modelDays, "usage-models-daily")}
</section>
<section class="card">
  <h2>${t("usage.byKey")}</h2>
  ${breakdown(t, "key", s.keys, "usage-keys")}
  ${dailyBreakdown(t, "key", labels, s.keyDays, "usage-keys-daily")}
</section>
<section class="card">
  <h2>${t("usage.export.heading")}</h2>
  <p>${t("usage.export.text")} <a class="button" href="/credits/history.csv" download data-testid="csv-export">${t("usage.export.button")}</a></p>
</section>`,
  });
}
