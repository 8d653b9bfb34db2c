/** Admin pages: users (credits, disable, role), all requests, the upstream pool, models. */
import { MAX_EMAIL_CHARS, MAX_CREDIT_GRANT } from "../../core/limits";
import { upstreamIdOf, type CatalogModel } from "../../core/models";
import { formatBytes, type ImageUsage } from "../../core/imageGallery";
import type { AccountStatus } from "../../engines/status";
import type { RequestRow } from "../../store/requests";
import type { UserRow } from "../../store/users";
import { formatTime, html, type Html, type Interpolation } from "../html";
import { csrfField, message, page, type Viewer } from "../layout";
import { historyFilter, pagination, requestsTable, type HistoryQuery } from "./requests";

export type AdminTab = "users" | "requests" | "upstreams" | "models" | "codes";

const TABS: { tab: AdminTab; href: string; label: string }[] = [
  { tab: "users", href: "/admin", label: "Users" },
  { tab: "requests", href: "/admin/requests", label: "All requests" },
  { tab: "upstreams", href: "/admin/upstreams", label: "Upstream pool" },
  { tab: "models", href: "/admin/models", label: "Models" },
  { tab: "codes", href: "/admin/codes", label: "Codes" },
];

export function adminPage(v: Viewer, tab: AdminTab, title: string, body: Interpolation): Html {
  return page({
    title: `Admin · ${title}`,
    section: "admin",
    viewer: v,
    body: html`<h1>Admin</h1>
<nav class="subnav" aria-label="Admin sections"><ul>${TABS.map(
      (t) => html`<li><a href="${t.href}"${t.tab === tab ? html` aria-current="page"` : ""}>${t.label}</a></li>`,
    )}</ul></nav>
${body}`,
  });
}

function storageCell(usage: ImageUsage | undefined): Html {
  if (!usage) return html`<td class="num storage muted" data-testid="storage">—</td>`;
  return html`<td class="num storage" data-testid="storage" title="${usage.bytes} bytes">${usage.images} · ${formatBytes(usage.bytes)}</td>`;
}

function userRow(v: Viewer, u: UserRow, usage: ImageUsage | undefined): Html {
  const self = u.id === v.user.id;
  return html`<tr data-user-email="${u.email}">
  <td>${u.email}</td>
  <td>${u.role === "admin" ? html`<span class="badge">admin</span>` : "user"}</td>
  <td class="num" data-testid="credits">${u.credits}</td>
  ${storageCell(usage)}
  <td>${u.disabled ? html`<span class="status bad">disabled</span>` : html`<span class="status ok">active</span>`}</td>
  <td class="nowrap" title="${formatTime(u.created_at)}">${formatTime(u.created_at).slice(0, 10)}</td>
  <td>
    <form method="post" action="/admin/users/${u.id}/credits" class="row compact">
      ${csrfField(v)}
      <label class="visually-hidden" for="amount-${u.id}">Credits for ${u.email}</label>
      <input id="amount-${u.id}" name="amount" type="number" min="1" max="${MAX_CREDIT_GRANT}" step="1" required class="amount" placeholder="N">
      <label class="visually-hidden" for="note-${u.id}">Note for ${u.email}</label>
      <input id="note-${u.id}" name="note" type="text" maxlength="200" placeholder="note" class="note">
      <button type="submit" name="op" value="grant" class="small" aria-label="Grant credits to ${u.email}">Grant</button>
      <button type="submit" name="op" value="deduct" class="small" aria-label="Deduct credits from ${u.email}">Deduct</button>
    </form>
  </td>
  <td class="actions">
    ${
      self
        ? html`<span class="muted">you</span>`
        : html`<form method="post" action="/admin/users/${u.id}/${u.disabled ? "enable" : "disable"}" class="inline"${u.disabled ? "" : html` data-confirm="Disable ${u.email}? Their keys and sessions stop working."`}>
      ${csrfField(v)}<button type="submit" class="small${u.disabled ? "" : " danger"}" aria-label="${u.disabled ? "Enable" : "Disable"} ${u.email}">${u.disabled ? "Enable" : "Disable"}</button></form>
    ${
      u.role === "admin"
        ? html`<form method="post" action="/admin/users/${u.id}/demote" class="inline" data-confirm="Remove admin rights from ${u.email}?">${csrfField(v)}<button type="submit" class="small" aria-label="Remove admin rights from ${u.email}">Remove admin</button></form>`
        : html`<form method="post" action="/admin/users/${u.id}/admin" class="inline" data-confirm="Make ${u.email} an admin?">${csrfField(v)}<button type="submit" class="small" aria-label="Make ${u.email} an admin">Make admin</button></form>`
    }`
    }
  </td>
</tr>`;
}

export function adminUsersPage(v: Viewer, s: { users: UserRow[]; more?: boolean; search: string; storage: Map<number, ImageUsage>; error?: string | null; notice?: string | null }): Html {
  return adminPage(
    v,
    "users",
    "Users",
    html`${message("error", s.error)}${message("notice", s.notice)}
<section class="card">
  <form method="get" action="/admin" class="row" role="search">
    <label for="user-search">Search by email</label>
    <input id="user-search" name="q" type="search" value="${s.search}" maxlength="${MAX_EMAIL_CHARS}">
    <button type="submit">Search</button>
  </form>
  ${
    s.users.length === 0
      ? html`<p class="muted">No users match.</p>`
      : html`<div class="table-wrap"><table class="users">
    <thead><tr><th scope="col">Email</th><th scope="col">Role</th><th scope="col" class="num">Credits</th><th scope="col" class="num" title="Kept images and the bytes they take">Images</th><th scope="col">Status</th><th scope="col">Created</th><th scope="col">Credits (ledger)</th><th scope="col">Account</th></tr></thead>
    <tbody>${s.users.map((u) => userRow(v, u, s.storage.get(u.id)))}</tbody>
  </table></div>`
  }
  ${s.more ? html`<p class="muted" role="status">Showing the first ${s.users.length} users${s.search ? " that match" : ""}; search by email to find the others.</p>` : ""}
</section>`,
  );
}

export function adminRequestsPage(v: Viewer, s: { query: HistoryQuery; requests: RequestRow[]; total: number; models: string[]; emails: Map<number, string> }): Html {
  return adminPage(
    v,
    "requests",
    "All requests",
    html`<section class="card">
  ${historyFilter("/admin/requests", s.query, s.models)}
  ${requestsTable(s.requests, { emails: s.emails })}
  ${pagination("/admin/requests", s.query, s.total)}
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
  const last = a.recent_failures.at(-1);
  return html`<tr>
  <td class="mono nowrap">${a.id}</td>
  <td><span class="status ${HEALTH_CLASS[a.state]}">${a.state}</span>${a.cooling_until ? html`<br><span class="muted nowrap">until ${isoTime(a.cooling_until)}</span>` : ""}${
    a.disabled_reason ? html`<br><span class="muted">${a.disabled_reason}</span>` : ""
  }</td>
  <td class="num">${a.in_flight} / ${a.max_concurrency}</td>
  <td class="num">${a.weight}</td>
  <td class="num">${a.consecutive_failures}</td>
  <td class="long">${last ? html`<span class="nowrap">${isoTime(last.at)}</span> ${last.kind}: ${last.message}` : html`<span class="muted">none</span>`}</td>
  <td>${
    a.state === "disabled"
      ? html`<form method="post" action="/admin/upstreams/${encodeURIComponent(upstreamId)}/accounts/${encodeURIComponent(a.id)}/enable" class="inline">${csrfField(v)}<button type="submit" class="small" aria-label="Enable account ${a.id} of ${upstreamId}">Enable</button></form>`
      : ""
  }</td>
</tr>`;
}

export function adminUpstreamsPage(v: Viewer, upstreams: UpstreamView[], notice?: string | null): Html {
  const body =
    upstreams.length === 0
      ? html`<section class="card"><p>No upstreams are configured: only the built-in models run. The pool appears here once <code>[[upstreams]]</code> are configured.</p></section>`
      : upstreams.map(
          (u) => html`<section class="card">
  <h2>${u.id} <span class="muted">(${u.kind})</span></h2>
  <p class="muted mono">${u.baseUrl}</p>
  <p>Models: ${u.models.length ? u.models.join(", ") : "none"}</p>
  <div class="table-wrap"><table>
    <thead><tr><th scope="col">Account</th><th scope="col">State</th><th scope="col" class="num nowrap">In flight</th><th scope="col" class="num">Weight</th><th scope="col" class="num nowrap">Failures in a row</th><th scope="col">Last failure</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
    <tbody>${u.accounts.map((a) => accountRow(v, u.id, a))}</tbody>
  </table></div>
</section>`,
        );
  return adminPage(v, "upstreams", "Upstream pool", html`${message("notice", notice)}${body}`);
}

/** The engine kind that serves a model: its upstream's `kind` (openai, sdwebui, …), or built-in. */
export type EngineKindOf = (model: CatalogModel) => string;

export function adminModelsPage(v: Viewer, models: CatalogModel[], engineKindOf: EngineKindOf): Html {
  return adminPage(
    v,
    "models",
    "Models",
    html`<section class="card"><div class="table-wrap"><table>
  <thead><tr><th scope="col">Id</th><th scope="col">Kind</th><th scope="col">Engine</th><th scope="col">Upstream</th><th scope="col">Upstream model</th><th scope="col">Sizes</th><th scope="col">Qualities</th><th scope="col" class="num" title="Credits per accepted image request">Price</th></tr></thead>
  <tbody>${models.map(
    (m) => html`<tr><td class="mono">${m.id}</td><td>${m.kind}</td><td class="mono">${engineKindOf(m)}</td><td>${upstreamIdOf(m) ?? "built-in"}</td><td class="mono">${m.upstreamModel}</td><td>${m.sizes?.join(", ") ?? (m.kind === "image" ? "any" : "—")}</td><td>${m.qualities?.join(", ") ?? (m.kind === "image" ? "any" : "—")}</td><td class="num" data-testid="price">${m.kind === "chat" ? html`<span class="muted">free</span>` : m.price === 0 ? "free" : m.price}</td></tr>`,
  )}</tbody>
</table></div></section>`,
  );
}
