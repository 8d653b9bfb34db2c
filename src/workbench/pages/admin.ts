/** Admin pages: the shared frame and tabs; users (credits, disable, role), the upstream pool, models. */
import { MAX_EMAIL_CHARS, MAX_CREDIT_GRANT } from "../../core/limits";
import { upstreamIdOf, type CatalogModel } from "../../core/models";
import { formatBytes, type ImageUsage } from "../../core/imageGallery";
import type { AccountStatus } from "../../engines/status";
import type { UserRow } from "../../store/users";
import { formatTime, html, type Html, type Interpolation } from "../html";
import type { MessageKey } from "../i18n";
import { csrfField, message, page, type Viewer } from "../layout";

export type AdminTab = "users" | "requests" | "upstreams" | "models" | "codes";

const TABS: { tab: AdminTab; href: string; label: Extract<MessageKey, `admin.tab.${string}`> }[] = [
  { tab: "users", href: "/admin", label: "admin.tab.users" },
  { tab: "requests", href: "/admin/requests", label: "admin.tab.requests" },
  { tab: "upstreams", href: "/admin/upstreams", label: "admin.tab.upstreams" },
  { tab: "models", href: "/admin/models", label: "admin.tab.models" },
  { tab: "codes", href: "/admin/codes", label: "admin.tab.codes" },
];

export function adminPage(v: Viewer, tab: AdminTab, body: Interpolation): Html {
  const t = v.t;
  const current = TABS.find((x) => x.tab === tab)!;
  return page({
    title: t("admin.title", { section: t(current.label) }),
    section: "admin",
    viewer: v,
    body: html`<h1>${t("admin.heading")}</h1>
<nav class="subnav" aria-label="${t("admin.sections")}"><ul>${TABS.map(
      (x) => html`<li><a href="${x.href}"${x.tab === tab ? html` aria-current="page"` : ""}>${t(x.label)}</a></li>`,
    )}</ul></nav>
${body}`,
  });
}

function storageCell(v: Viewer, usage: ImageUsage | undefined): Html {
  if (!usage) return html`<td class="num storage muted" data-testid="storage">—</td>`;
  return html`<td class="num storage" data-testid="storage" title="${v.t("admin.users.bytes", { count: usage.bytes })}">${usage.images} · ${formatBytes(usage.bytes)}</td>`;
}

function userRow(v: Viewer, u: UserRow, usage: ImageUsage | undefined, spent: number): Html {
  const t = v.t;
  const self = u.id === v.user.id;
  const email = u.email;
  return html`<tr data-user-email="${u.email}">
  <td><a href="/admin/users/${u.id}" class="cell-link" aria-label="${t("operators.users.detailsLabel", { email })}">${u.email}</a></td>
  <td>${u.role === "admin" ? html`<span class="badge">${t("admin.role.admin")}</span>` : t("admin.role.user")}</td>
  <td class="num" data-testid="credits">${u.credits}</td>
  <td class="num" data-testid="spent">${spent}</td>
  ${storageCell(v, usage)}
  <td>${u.disabled ? html`<span class="status bad">${t("admin.status.disabled")}</span>` : html`<span class="status ok">${t("admin.status.active")}</span>`}</td>
  <td class="nowrap" title="${formatTime(u.created_at)}">${formatTime(u.created_at).slice(0, 10)}</td>
  <td>
    <form method="post" action="/admin/users/${u.id}/credits" class="row compact">
      ${csrfField(v)}
      <label class="visually-hidden" for="amount-${u.id}">${t("admin.credits.amountLabel", { email })}</label>
      <input id="amount-${u.id}" name="amount" type="number" min="1" max="${MAX_CREDIT_GRANT}" step="1" required class="amount" placeholder="N">
      <label class="visually-hidden" for="note-${u.id}">${t("admin.credits.noteLabel", { email })}</label>
      <input id="note-${u.id}" name="note" type="text" maxlength="200" placeholder="${t("admin.credits.notePlaceholder")}" class="note">
      <button type="submit" name="op" value="grant" class="small" aria-label="${t("admin.credits.grantLabel", { email })}">${t("admin.credits.grant")}</button>
      <button type="submit" name="op" value="deduct" class="small" aria-label="${t("admin.credits.deductLabel", { email })}">${t("admin.credits.deduct")}</button>
    </form>
  </td>
  <td class="actions">
    ${
      self
        ? html`<span class="muted">${t("admin.you")}</span>`
        : html`<form method="post" action="/admin/users/${u.id}/${u.disabled ? "enable" : "disable"}" class="inline"${u.disabled ? "" : html` data-confirm="${t("admin.disableConfirm", { email })}"`}>
      ${csrfField(v)}<button type="submit" class="small${u.disabled ? "" : " danger"}" aria-label="${u.disabled ? t("admin.enableLabel", { email }) : t("admin.disableLabel", { email })}">${u.disabled ? t("admin.enable") : t("admin.disable")}</button></form>
    ${
      u.role === "admin"
        ? html`<form method="post" action="/admin/users/${u.id}/demote" class="inline" data-confirm="${t("admin.demoteConfirm", { email })}">${csrfField(v)}<button type="submit" class="small" aria-label="${t("admin.demoteLabel", { email })}">${t("admin.demote")}</button></form>`
        : html`<form method="post" action="/admin/users/${u.id}/admin" class="inline" data-confirm="${t("admin.promoteConfirm", { email })}">${csrfField(v)}<button type="submit" class="small" aria-label="${t("admin.promoteLabel", { email })}">${t("admin.promote")}</button></form>`
    }`
    }
  </td>
</tr>`;
}

export interface AdminUsersState {
  users: UserRow[];
  more?: boolean;
  search: string;
  storage: Map<number, ImageUsage>;
  /** Credits each shown user spent on images (charged minus refunded). */
  spent: Map<number, number>;
  /** The "Create a user" card (adminUser.ts). */
  createUser: Html;
  error?: string | null;
  notice?: string | null;
}

export function adminUsersPage(v: Viewer, s: AdminUsersState): Html {
  const t = v.t;
  return adminPage(
    v,
    "users",
    html`${message("error", s.error)}${message("notice", s.notice)}
${s.createUser}
<section class="card">
  <form method="get" action="/admin" class="row" role="search">
    <label for="user-search">${t("admin.users.search")}</label>
    <input id="user-search" name="q" type="search" value="${s.search}" maxlength="${MAX_EMAIL_CHARS}">
    <button type="submit">${t("admin.users.searchSubmit")}</button>
  </form>
  ${
    s.users.length === 0
      ? html`<p class="muted">${t("admin.users.empty")}</p>`
      : html`<div class="table-wrap"><table class="users">
    <thead><tr><th scope="col">${t("admin.users.col.email")}</th><th scope="col">${t("admin.users.col.role")}</th><th scope="col" class="num">${t("admin.users.col.credits")}</th><th scope="col" class="num" title="${t("operators.users.col.spentHint")}">${t("operators.users.col.spent")}</th><th scope="col" class="num" title="${t("admin.users.col.imagesHint")}">${t("admin.users.col.images")}</th><th scope="col">${t("admin.users.col.status")}</th><th scope="col">${t("admin.users.col.created")}</th><th scope="col">${t("admin.users.col.ledger")}</th><th scope="col">${t("admin.users.col.account")}</th></tr></thead>
    <tbody>${s.users.map((u) => userRow(v, u, s.storage.get(u.id), s.spent.get(u.id) ?? 0))}</tbody>
  </table></div>`
  }
  ${s.more ? html`<p class="muted" role="status">${s.search ? t("admin.users.moreMatching", { count: s.users.length }) : t("admin.users.more", { count: s.users.length })}</p>` : ""}
</section>`,
  );
}

/** One upstream as the admin sees it: its configuration and the live state of its accounts. */
export interface UpstreamView {
  id: string;
  kind: string;
  baseUrl: string;
  models: string[];
  accounts: AccountStatus[];
}

const isoTime = (iso: string) => formatTime(Date.parse(iso));

const HEALTH_CLASS: Record<AccountStatus["state"], string> = { healthy: "ok", cooling: "warn", probing: "warn", disabled: "bad" };

function accountRow(v: Viewer, upstreamId: string, a: AccountStatus): Html {
  const t = v.t;
  const last = a.recent_failures.at(-1);
  return html`<tr>
  <td class="mono nowrap">${a.id}</td>
  <td><span class="status ${HEALTH_CLASS[a.state]}" data-state="${a.state}">${t(`admin.upstreams.state.${a.state}`)}</span>${a.cooling_until ? html`<br><span class="muted nowrap">${t("admin.upstreams.until", { time: isoTime(a.cooling_until) })}</span>` : ""}${
    a.disabled_reason ? html`<br><span class="muted">${a.disabled_reason}</span>` : ""
  }</td>
  <td class="num">${a.in_flight} / ${a.max_concurrency}</td>
  <td class="num">${a.weight}</td>
  <td class="num">${a.consecutive_failures}</td>
  <td class="long">${last ? html`<span class="nowrap">${isoTime(last.at)}</span> ${last.kind}: ${last.message}` : html`<span class="muted">${t("admin.upstreams.noFailure")}</span>`}</td>
  <td>${
    a.state === "disabled"
      ? html`<form method="post" action="/admin/upstreams/${encodeURIComponent(upstreamId)}/accounts/${encodeURIComponent(a.id)}/enable" class="inline">${csrfField(v)}<button type="submit" class="small" aria-label="${t("admin.upstreams.enableLabel", { account: a.id, upstream: upstreamId })}">${t("admin.enable")}</button></form>`
      : ""
  }</td>
</tr>`;
}

export function adminUpstreamsPage(v: Viewer, upstreams: UpstreamView[], notice?: string | null): Html {
  const t = v.t;
  const body =
    upstreams.length === 0
      ? html`<section class="card"><p>${t.html("admin.upstreams.none")}</p></section>`
      : upstreams.map(
          (u) => html`<section class="card">
  <h2>${u.id} <span class="muted">(${u.kind})</span></h2>
  <p class="muted mono">${u.baseUrl}</p>
  <p>${t("admin.upstreams.models", { models: u.models.length ? u.models.join(", ") : t("admin.upstreams.noModels") })}</p>
  <div class="table-wrap"><table>
    <thead><tr><th scope="col">${t("admin.upstreams.col.account")}</th><th scope="col">${t("admin.upstreams.col.state")}</th><th scope="col" class="num nowrap">${t("admin.upstreams.col.inFlight")}</th><th scope="col" class="num">${t("admin.upstreams.col.weight")}</th><th scope="col" class="num nowrap">${t("admin.upstreams.col.failures")}</th><th scope="col">${t("admin.upstreams.col.lastFailure")}</th><th scope="col"><span class="visually-hidden">${t("admin.upstreams.col.actions")}</span></th></tr></thead>
    <tbody>${u.accounts.map((a) => accountRow(v, u.id, a))}</tbody>
  </table></div>
</section>`,
        );
  return adminPage(v, "upstreams", html`${message("notice", notice)}${body}`);
}

/** The engine kind that serves a model: its upstream's `kind` (openai, sdwebui, …), or built-in. */
export type EngineKindOf = (model: CatalogModel) => string;

export function adminModelsPage(v: Viewer, models: CatalogModel[], engineKindOf: EngineKindOf): Html {
  const t = v.t;
  const any = (m: CatalogModel) => (m.kind === "image" ? t("admin.models.any") : "—");
  return adminPage(
    v,
    "models",
    html`<section class="card"><div class="table-wrap"><table>
  <thead><tr><th scope="col">${t("admin.models.col.id")}</th><th scope="col">${t("admin.models.col.kind")}</th><th scope="col">${t("admin.models.col.engine")}</th><th scope="col">${t("admin.models.col.upstream")}</th><th scope="col">${t("admin.models.col.upstreamModel")}</th><th scope="col">${t("admin.models.col.sizes")}</th><th scope="col">${t("admin.models.col.qualities")}</th><th scope="col" class="num" title="${t("admin.models.col.priceHint")}">${t("admin.models.col.price")}</th></tr></thead>
  <tbody>${models.map(
    (m) => html`<tr><td class="mono">${m.id}</td><td>${t(`admin.models.kind.${m.kind}`)}</td><td class="mono">${upstreamIdOf(m) === undefined ? t("admin.models.builtIn") : engineKindOf(m)}</td><td>${upstreamIdOf(m) ?? t("admin.models.builtIn")}</td><td class="mono">${m.upstreamModel}</td><td>${m.sizes?.join(", ") ?? any(m)}</td><td>${m.qualities?.join(", ") ?? any(m)}</td><td class="num" data-testid="price">${m.kind === "chat" ? html`<span class="muted">${t("admin.models.free")}</span>` : m.price === 0 ? t("admin.models.free") : m.price}</td></tr>`,
  )}</tbody>
</table></div></section>`,
  );
}
