/**
 * Admin · All requests: the history of every user, filtered by user (email), key (display
 * prefix), model, kind, status, a date range (UTC days) and request id.
 */
import { MAX_EMAIL_CHARS } from "../../core/limits";
import type { HistoryFilter, HistoryPage } from "../../store/historyPages";
import { html, type Html } from "../html";
import type { Translator } from "../i18n";
import { message, type Viewer } from "../layout";
import { adminPage } from "./admin";
import { historyFilter, pagination, parseHistoryQuery, requestsTable, toFilter, type HistoryQuery } from "./requests";

export interface AdminRequestsQuery extends HistoryQuery {
  user?: string;
  key?: string;
  /** UTC days, YYYY-MM-DD, both ends included. */
  from?: string;
  to?: string;
  id?: string;
}

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const DAY_MS = 86_400_000;

/** Start of a UTC day as ms, or undefined when the text is not a real date. */
function dayStart(text: string | undefined): number | undefined {
  if (!text || !DAY.test(text)) return undefined;
  const ms = Date.parse(`${text}T00:00:00Z`);
  return Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== text ? undefined : ms;
}

/** Reads the filter; values that cannot be right (too long, not a date) are dropped rather than trusted. */
export function parseAdminRequestsQuery(q: Record<string, string | undefined>): AdminRequestsQuery {
  const text = (v: string | undefined, max: number) => {
    const t = (v ?? "").trim();
    return t && t.length <= max ? t : undefined;
  };
  return {
    ...parseHistoryQuery(q),
    user: text(q.user, MAX_EMAIL_CHARS),
    key: text(q.key, 64),
    from: dayStart(q.from) === undefined ? undefined : q.from,
    to: dayStart(q.to) === undefined ? undefined : q.to,
    id: text(q.id, 100),
  };
}

/** The store filter, with the user and key already looked up (null: named, but no such one). */
export function adminFilter(q: AdminRequestsQuery, ids: { userId?: number | null; keyId?: number | null }): HistoryFilter | null {
  if (ids.userId === null || ids.keyId === null) return null;
  const to = dayStart(q.to);
  return { ...toFilter(q), userId: ids.userId, keyId: ids.keyId, id: q.id, from: dayStart(q.from), before: to === undefined ? undefined : to + DAY_MS };
}

export function extraParams(q: AdminRequestsQuery): Record<string, string | undefined> {
  return { user: q.user, key: q.key, from: q.from, to: q.to, id: q.id };
}

function extraFields(t: Translator, q: AdminRequestsQuery): Html {
  return html`<label for="f-user">${t("operators.requests.user")}</label>
  <input id="f-user" name="user" type="search" maxlength="${MAX_EMAIL_CHARS}" placeholder="${t("operators.requests.userPlaceholder")}" value="${q.user ?? ""}">
  <label for="f-key">${t("operators.requests.key")}</label>
  <input id="f-key" name="key" type="search" maxlength="64" placeholder="sk-atl-…" class="mono" value="${q.key ?? ""}">
  <label for="f-from">${t("operators.requests.from")}</label>
  <input id="f-from" name="from" type="date" value="${q.from ?? ""}">
  <label for="f-to">${t("operators.requests.to")}</label>
  <input id="f-to" name="to" type="date" value="${q.to ?? ""}">
  <label for="f-id">${t("operators.requests.id")}</label>
  <input id="f-id" name="id" type="search" maxlength="100" class="mono" value="${q.id ?? ""}">
  `;
}

export interface AdminRequestsState {
  query: AdminRequestsQuery;
  /** The page of the history shown, with its links' cursors. */
  history: HistoryPage;
  total: number;
  models: string[];
  emails: Map<number, string>;
  keys: Map<number, string>;
  /** Why nothing can match (a user or key that does not exist). */
  problem?: string | null;
}

export function adminRequestsPage(v: Viewer, s: AdminRequestsState): Html {
  const t = v.t;
  return adminPage(
    v,
    "requests",
    html`<section class="card">
  ${historyFilter(t, "/admin/requests", s.query, s.models, extraFields(t, s.query))}
  <p class="muted">${t("operators.requests.hint")}</p>
  ${message("error", s.problem)}
  ${requestsTable(t, s.history.rows, { emails: s.emails, keys: s.keys, errorDetails: true })}
  ${pagination(t, "/admin/requests", s.query, s.history, s.total, extraParams(s.query))}
</section>`,
  );
}
