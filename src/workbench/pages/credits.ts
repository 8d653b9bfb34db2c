/** Credits and history: the balance, the filterable request history and the ledger. */
import type { LedgerRow } from "../../store/credits";
import type { HistoryPage } from "../../store/historyPages";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { page, type Viewer } from "../layout";
import { historyFilter, pagination, requestsTable, type HistoryQuery } from "./requests";
import { redeemCard, type RedeemState } from "./redeem";

export interface CreditsPageState {
  query: HistoryQuery;
  /** The page of the history shown, with its links' cursors. */
  history: HistoryPage;
  total: number;
  models: string[];
  ledger: LedgerRow[];
  /** request id → its kept image, for the rows shown. */
  images: Map<string, string>;
  /** The outcome of redeeming a code, if this page answers one. */
  redeem?: RedeemState;
}

/** The tabs of the Credits section: the history and ledger, and the usage dashboard. */
export function creditsTabs(t: Translator, current: "history" | "usage"): Html {
  const tabs = [
    { tab: "history", href: "/credits", label: t("usage.tab.history") },
    { tab: "usage", href: "/usage", label: t("usage.tab.usage") },
  ] as const;
  return html`<nav class="subnav" aria-label="${t("usage.tabs.label")}"><ul>${tabs.map(
    (x) => html`<li><a href="${x.href}"${x.tab === current ? html` aria-current="page"` : ""}>${x.label}</a></li>`,
  )}</ul></nav>`;
}

export function ledgerTable(t: Translator, rows: LedgerRow[]): Html {
  if (rows.length === 0) return html`<p class="muted">${t("history.ledger.empty")}</p>`;
  return html`<div class="table-wrap"><table class="ledger">
  <thead><tr><th scope="col">${t("history.ledger.col.time")}</th><th scope="col">${t("history.ledger.col.kind")}</th><th scope="col" class="num">${t("history.ledger.col.amount")}</th><th scope="col">${t("history.ledger.col.request")}</th><th scope="col">${t("history.ledger.col.note")}</th><th scope="col">${t("history.ledger.col.by")}</th></tr></thead>
  <tbody>${rows.map(
    (l) => html`<tr>
    <td class="nowrap">${formatTime(l.created_at)}</td>
    <td>${t(`history.ledgerKind.${l.kind}`)}</td>
    <td class="num ${l.amount > 0 ? "plus" : "minus"}">${l.amount > 0 ? `+${l.amount}` : `−${-l.amount}`}</td>
    <td class="mono">${l.request_id ?? ""}</td>
    <td>${l.note ?? ""}</td>
    <td>${l.actor ?? ""}</td>
  </tr>`,
  )}</tbody>
</table></div>`;
}

export function creditsPage(v: Viewer, s: CreditsPageState): Html {
  const t = v.t;
  return page({
    title: t("history.credits.title"),
    section: "credits",
    viewer: v,
    body: html`<h1>${t("history.credits.title")}</h1>
${creditsTabs(t, "history")}
<section class="card balance-card">
  <p class="big"><span data-testid="balance-big">${v.user.credits}</span> ${t.plural("common.credits", v.user.credits)}</p>
  <p class="muted">${t("history.credits.explain")}</p>
</section>
${redeemCard(v, s.redeem)}
<section class="card">
  <h2>${t("history.requests.heading")}</h2>
  ${historyFilter(t, "/credits", s.query, s.models)}
  ${requestsTable(t, s.history.rows, { images: s.images, detailLinks: true })}
  ${pagination(t, "/credits", s.query, s.history, s.total)}
  <p class="muted">${t("usage.history.hint")} <a href="/credits/history.csv" download data-testid="csv-export">${t("usage.history.csv")}</a></p>
</section>
<section class="card">
  <h2>${t("history.ledger.heading")} <span class="muted">${t("history.ledger.latest", { count: 100 })}</span></h2>
  ${ledgerTable(t, s.ledger)}
</section>`,
  });
}
