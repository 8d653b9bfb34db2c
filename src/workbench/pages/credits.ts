/** Credits and history: the balance, the filterable request history and the ledger. */
import type { LedgerRow } from "../../store/credits";
import type { RequestRow } from "../../store/requests";
import { formatTime, html, type Html } from "../html";
import { page, type Viewer } from "../layout";
import { historyFilter, pagination, requestsTable, type HistoryQuery } from "./requests";
import { redeemCard, type RedeemState } from "./redeem";

export interface CreditsPageState {
  query: HistoryQuery;
  requests: RequestRow[];
  total: number;
  models: string[];
  ledger: LedgerRow[];
  /** request id → its kept image, for the rows shown. */
  images: Map<string, string>;
  /** The outcome of redeeming a code, if this page answers one. */
  redeem?: RedeemState;
}

export function ledgerTable(rows: LedgerRow[]): Html {
  if (rows.length === 0) return html`<p class="muted">No ledger entries yet.</p>`;
  return html`<div class="table-wrap"><table class="ledger">
  <thead><tr><th scope="col">Time</th><th scope="col">Kind</th><th scope="col" class="num">Amount</th><th scope="col">Request</th><th scope="col">Note</th><th scope="col">By</th></tr></thead>
  <tbody>${rows.map(
    (l) => html`<tr>
    <td class="nowrap">${formatTime(l.created_at)}</td>
    <td>${l.kind}</td>
    <td class="num ${l.amount > 0 ? "plus" : "minus"}">${l.amount > 0 ? `+${l.amount}` : `−${-l.amount}`}</td>
    <td class="mono">${l.request_id ?? ""}</td>
    <td>${l.note ?? ""}</td>
    <td>${l.actor ?? ""}</td>
  </tr>`,
  )}</tbody>
</table></div>`;
}

export function creditsPage(v: Viewer, s: CreditsPageState): Html {
  return page({
    title: "Credits & history",
    section: "credits",
    viewer: v,
    body: html`<h1>Credits &amp; history</h1>
<section class="card balance-card">
  <p class="big"><span data-testid="balance-big">${v.user.credits}</span> ${v.user.credits === 1 ? "credit" : "credits"}</p>
  <p class="muted">Each accepted image request costs its model's price (1 credit unless the models list says otherwise) and is refunded automatically if it fails. Chat is free.</p>
</section>
${redeemCard(v, s.redeem)}
<section class="card">
  <h2>Requests</h2>
  ${historyFilter("/credits", s.query, s.models)}
  ${requestsTable(s.requests, { images: s.images })}
  ${pagination("/credits", s.query, s.total)}
</section>
<section class="card">
  <h2>Ledger <span class="muted">(latest 100)</span></h2>
  ${ledgerTable(s.ledger)}
</section>`,
  });
}
