/** The request history table with its filter form and pagination (used by Credits and Admin). */
import type { RequestRow } from "../../store/requests";
import { HISTORY_SCAN_ROWS, type HistoryCursor, type HistoryFilter, type HistoryPage, type HistoryPosition } from "../../store/historyPages";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";

export const PAGE_SIZE = 25;
export const KINDS = ["image", "chat"] as const;
export const STATUSES = ["pending", "succeeded", "failed", "interrupted"] as const;

export interface HistoryQuery {
  kind?: RequestRow["kind"];
  status?: RequestRow["status"];
  model?: string;
  /** Where the page starts (the `older` or `newer` cursor of the page linked from); the newest page without one. */
  at: HistoryPosition;
}

/** A cursor in a link: the row's time in ms, a dot, its id. */
const CURSOR = /^(\d{1,15})\.(.{1,200})$/s;

function parseCursor(text: string | undefined): HistoryCursor | undefined {
  const m = text === undefined ? null : CURSOR.exec(text);
  return m ? { createdAt: Number(m[1]), id: m[2]! } : undefined;
}

const cursorText = (c: HistoryCursor) => `${c.createdAt}.${c.id}`;

/** Reads the filter; unknown values are ignored rather than trusted (a cursor that does not parse: the newest page). */
export function parseHistoryQuery(q: Record<string, string | undefined>): HistoryQuery {
  const kind = KINDS.find((k) => k === q.kind);
  const status = STATUSES.find((s) => s === q.status);
  const model = q.model && q.model.length <= 200 ? q.model : undefined;
  const older = parseCursor(q.older);
  const newer = older ? undefined : parseCursor(q.newer);
  return { kind, status, model, at: older ? { older } : newer ? { newer } : null };
}

export function toFilter(q: HistoryQuery, userId?: number): HistoryFilter {
  return { userId, kind: q.kind, status: q.status, model: q.model };
}

/** `extra`: more filter fields a page adds (the admin's user, key, dates, request id), kept across pages. */
function queryString(q: HistoryQuery, at: NonNullable<HistoryPosition>, extra: Record<string, string | undefined> = {}): string {
  const p = new URLSearchParams();
  for (const [name, value] of Object.entries(extra)) if (value) p.set(name, value);
  if (q.kind) p.set("kind", q.kind);
  if (q.status) p.set("status", q.status);
  if (q.model) p.set("model", q.model);
  if ("older" in at) p.set("older", cursorText(at.older));
  else p.set("newer", cursorText(at.newer));
  return `?${p}`;
}

function option(value: string, selected: string | undefined, label = value): Html {
  return html`<option value="${value}"${value === (selected ?? "") ? html` selected` : ""}>${label}</option>`;
}

/** `extraFields`: a page's own filter fields, placed before the button. */
export function historyFilter(t: Translator, action: string, q: HistoryQuery, models: string[], extraFields: Html = html``): Html {
  return html`<form method="get" action="${action}" class="row filters" aria-label="${t("history.filter.label")}">
  <label for="f-kind">${t("history.filter.kind")}</label>
  <select id="f-kind" name="kind">${option("", q.kind, t("common.any"))}${KINDS.map((k) => option(k, q.kind, t(`history.kind.${k}`)))}</select>
  <label for="f-status">${t("history.filter.status")}</label>
  <select id="f-status" name="status">${option("", q.status, t("common.any"))}${STATUSES.map((s) => option(s, q.status, t(`history.status.${s}`)))}</select>
  <label for="f-model">${t("history.filter.model")}</label>
  <select id="f-model" name="model">${option("", q.model, t("common.any"))}${models.map((m) => option(m, q.model))}</select>
  ${extraFields}<button type="submit">${t("history.filter.submit")}</button>
</form>`;
}

function credit(t: Translator, r: RequestRow): Html {
  if (r.credits_charged === 0) return html`<span class="muted">${t("history.free")}</span>`;
  if (r.credits_refunded > 0) return html`−${r.credits_charged} <span class="status ok">${t("history.refunded", { count: r.credits_refunded })}</span>`;
  return html`−${r.credits_charged}`;
}

const STATUS_CLASS: Record<RequestRow["status"], string> = { pending: "warn", succeeded: "ok", failed: "bad", interrupted: "bad" };

/**
 * opts.emails adds a User column (admin); opts.keys (key id → display prefix) a Key column, and
 * each time links to its request alone (by id, which the filter then shows) (admin);
 * opts.images (request id → image id, the viewer's own kept images) adds an Image column
 * linking to each image's gallery page; opts.detailLinks makes each row's time a link to the
 * request's own page (the viewer's history); opts.errorDetails adds each failure's detail (the
 * engine's redacted words: upstream, account, transport error) under its message: admins only.
 */
export function requestsTable(t: Translator, rows: RequestRow[], opts: { emails?: Map<number, string>; keys?: Map<number, string>; images?: Map<string, string>; detailLinks?: boolean; errorDetails?: boolean } = {}): Html {
  if (rows.length === 0) return html`<p class="muted">${t("history.empty")}</p>`;
  return html`<div class="table-wrap"><table class="requests">
  <thead><tr><th scope="col">${t("history.col.time")}</th>${opts.emails ? html`<th scope="col">${t("history.col.user")}</th>` : ""}${opts.keys ? html`<th scope="col">${t("history.col.key")}</th>` : ""}<th scope="col">${t("history.col.kind")}</th><th scope="col">${t("history.col.model")}</th><th scope="col">${t("history.col.status")}</th><th scope="col">${t("history.col.credits")}</th><th scope="col">${t("history.col.generation")}</th><th scope="col">${t("history.col.prompt")}</th>${opts.images ? html`<th scope="col">${t("history.col.image")}</th>` : ""}<th scope="col">${t("history.col.error")}</th></tr></thead>
  <tbody>${rows.map(
    (r) => html`<tr>
    <td class="nowrap">${
      opts.keys
        ? html`<a href="/admin/requests?id=${encodeURIComponent(r.id)}" class="cell-link" data-request-id="${r.id}" title="${t("history.requestId", { id: r.id })}">${formatTime(r.created_at)}</a>`
        : opts.detailLinks
          ? html`<a href="/credits/requests/${r.id}" class="cell-link" data-testid="request-link" aria-label="${t("usage.history.detailLabel", { time: formatTime(r.created_at) })}">${formatTime(r.created_at)}</a>`
          : formatTime(r.created_at)
    }</td>
    ${opts.emails ? html`<td>${opts.emails.get(r.user_id) ?? `#${r.user_id}`}</td>` : ""}
    ${opts.keys ? html`<td class="mono nowrap">${r.key_id === null ? html`<span class="muted">${t("history.sessionKey")}</span>` : (opts.keys.get(r.key_id) ?? `#${r.key_id}`)}</td>` : ""}
    <td>${t(`history.kind.${r.kind}`)}</td>
    <td class="mono nowrap">${r.model}</td>
    <td><span class="status ${STATUS_CLASS[r.status]}" data-status="${r.status}">${t(`history.status.${r.status}`)}</span></td>
    <td class="nowrap">${credit(t, r)}</td>
    <td class="nowrap">${r.generation_ms === null ? "—" : `${(r.generation_ms / 1000).toFixed(2)} s`}</td>
    <td class="prompt" title="${r.prompt ?? ""}">${truncate(r.prompt)}</td>
    ${opts.images ? html`<td class="nowrap">${imageLink(t, opts.images.get(r.id))}</td>` : ""}
    <td class="error-cell">${r.error_message ?? ""}${opts.errorDetails && r.error_detail ? errorDetail(t, r.error_detail) : ""}</td>
  </tr>`,
  )}</tbody>
</table></div>`;
}

/**
 * A failure's detail for admins (issue 16), labelled so it reads apart from what the user was
 * told; folded (a disclosure) so a long transport error does not make every row tall.
 */
function errorDetail(t: Translator, detail: string): Html {
  return html`<details class="error-detail" data-testid="error-detail"><summary>${t("history.errorDetail")}</summary><span class="mono">${detail}</span></details>`;
}

function imageLink(t: Translator, imageId: string | undefined): Html {
  return imageId ? html`<a href="/gallery/${imageId}" data-testid="history-image">${t("history.viewImage")}</a>` : html``;
}

function truncate(text: string | null): string {
  if (!text) return "";
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

/**
 * Newer and Older links (cursors, see store/historyPages), the total, and a word when the page
 * stopped at the search bound before it was full (its links carry the search on).
 */
export function pagination(t: Translator, action: string, q: HistoryQuery, page: Pick<HistoryPage, "newer" | "older" | "partial">, total: number, extra: Record<string, string | undefined> = {}): Html {
  return html`<nav class="pager" aria-label="${t("common.pager.label")}">
  ${page.newer ? html`<a href="${action}${queryString(q, { newer: page.newer }, extra)}" rel="prev">${t("common.pager.newer")}</a>` : html`<span class="muted">${t("common.pager.newer")}</span>`}
  <span>${t.plural("history.pager.total", total)}</span>
  ${page.older ? html`<a href="${action}${queryString(q, { older: page.older }, extra)}" rel="next">${t("common.pager.older")}</a>` : html`<span class="muted">${t("common.pager.older")}</span>`}
</nav>${page.partial ? html`<p class="muted" data-testid="history-partial">${t("history.pager.partial", { rows: HISTORY_SCAN_ROWS.toLocaleString("en-US") })}</p>` : ""}`;
}
