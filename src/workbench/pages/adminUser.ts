/**
 * Admin · one user: balance, spend and kept images; their API keys (with each key's spend) and
 * a Revoke button; a new password (which ends their sessions); links to their requests.
 * Also the users page's "Create a user" card.
 */
import { MAX_CREDIT_GRANT, MAX_EMAIL_CHARS } from "../../core/limits";
import { formatBytes, type ImageUsage } from "../../core/imageGallery";
import type { ApiKeyWithSpend } from "../../store/apiKeys";
import type { UserRow } from "../../store/users";
import { formatTime, html, type Html } from "../html";
import { csrfField, message, type Viewer } from "../layout";
import { adminPage } from "./admin";

export interface NewUserForm {
  email?: string;
  credits?: string;
  role?: string;
}

/** The "Create a user" card of the users page; the password follows the sign-up rule. */
export function createUserCard(v: Viewer, minPasswordLength: number, f: NewUserForm = {}): Html {
  const t = v.t;
  return html`<section class="card" aria-labelledby="create-user-title">
  <h2 id="create-user-title">${t("operators.create.heading")}</h2>
  <form method="post" action="/admin/users" class="row fields">
    ${csrfField(v)}
    <label for="new-email">${t("operators.create.email")}</label>
    <input id="new-email" name="email" type="email" required maxlength="${MAX_EMAIL_CHARS}" autocomplete="off" value="${f.email ?? ""}">
    <label for="new-password">${t("operators.create.password")}</label>
    <input id="new-password" name="password" type="password" required minlength="${minPasswordLength}" autocomplete="new-password">
    <label for="new-credits">${t("operators.create.credits")}</label>
    <input id="new-credits" name="credits" type="number" min="0" max="${MAX_CREDIT_GRANT}" step="1" class="amount" value="${f.credits ?? "0"}">
    <label for="new-role">${t("operators.create.role")}</label>
    <select id="new-role" name="role"><option value="user"${f.role === "admin" ? "" : html` selected`}>${t("admin.role.user")}</option><option value="admin"${f.role === "admin" ? html` selected` : ""}>${t("admin.role.admin")}</option></select>
    <button type="submit" class="primary">${t("operators.create.submit")}</button>
  </form>
  <p class="muted">${t("operators.create.hint", { min: minPasswordLength })}</p>
</section>`;
}

export interface AdminUserState {
  user: UserRow;
  keys: ApiKeyWithSpend[];
  spent: number;
  usage?: ImageUsage;
  minPasswordLength: number;
  error?: string | null;
  notice?: string | null;
}

function keyRow(v: Viewer, u: UserRow, k: ApiKeyWithSpend): Html {
  const t = v.t;
  const active = k.revoked_at === null;
  const names = { name: k.name, email: u.email };
  return html`<tr>
  <td class="name">${k.name}</td>
  <td class="mono nowrap">${k.prefix}…</td>
  <td class="num">${k.credits_spent}</td>
  <td class="nowrap">${formatTime(k.created_at)}</td>
  <td class="nowrap">${formatTime(k.last_used_at)}</td>
  <td>${active ? html`<span class="status ok">${t("operators.keys.active")}</span>` : html`<span class="status bad">${t("operators.keys.revoked")}</span> <span class="muted">${formatTime(k.revoked_at)}</span>`}</td>
  <td class="actions">${
    active
      ? html`<form method="post" action="/admin/users/${u.id}/keys/${k.id}/revoke" class="inline" data-confirm="${t("operators.keys.revokeConfirm", names)}">
      ${csrfField(v)}<button type="submit" class="danger small" aria-label="${t("operators.keys.revokeLabel", names)}">${t("operators.keys.revoke")}</button></form>`
      : ""
  }</td>
</tr>`;
}

export function adminUserPage(v: Viewer, s: AdminUserState): Html {
  const t = v.t;
  const u = s.user;
  const requests = `/admin/requests?user=${encodeURIComponent(u.email)}`;
  return adminPage(
    v,
    "users",
    html`<p><a href="/admin">${t("operators.user.back")}</a></p>
${message("error", s.error)}${message("notice", s.notice)}
<section class="card" aria-labelledby="user-title">
  <h2 id="user-title">${u.email} ${u.role === "admin" ? html`<span class="badge">${t("admin.role.admin")}</span>` : ""} ${
    u.disabled ? html`<span class="status bad">${t("admin.status.disabled")}</span>` : html`<span class="status ok">${t("admin.status.active")}</span>`
  }</h2>
  <dl class="kv">
    <dt>${t("operators.user.balance")}</dt><dd data-testid="user-balance">${t.plural("operators.credits.each", u.credits)}</dd>
    <dt>${t("operators.user.spent")}</dt><dd data-testid="user-spent">${t.plural("operators.credits.each", s.spent)}</dd>
    <dt>${t("operators.user.images")}</dt><dd data-testid="user-storage">${s.usage ? `${s.usage.images} · ${formatBytes(s.usage.bytes)}` : t("operators.user.noImages")}</dd>
    <dt>${t("operators.user.created")}</dt><dd>${formatTime(u.created_at)}</dd>
  </dl>
  <p class="actions-row"><a href="${requests}">${t("operators.user.requests")}</a> <a href="${requests}&amp;status=failed">${t("operators.user.failedRequests")}</a></p>
</section>
<section class="card" aria-labelledby="keys-title">
  <h2 id="keys-title">${t("operators.keys.heading")}</h2>
  ${
    s.keys.length === 0
      ? html`<p class="muted">${t("operators.keys.empty")}</p>`
      : html`<div class="table-wrap"><table class="keys">
    <thead><tr><th scope="col">${t("operators.keys.col.name")}</th><th scope="col">${t("operators.keys.col.prefix")}</th><th scope="col" class="num">${t("operators.keys.col.spent")}</th><th scope="col">${t("operators.keys.col.created")}</th><th scope="col">${t("operators.keys.col.lastUsed")}</th><th scope="col">${t("operators.keys.col.status")}</th><th scope="col"><span class="visually-hidden">${t("operators.keys.col.actions")}</span></th></tr></thead>
    <tbody>${s.keys.map((k) => keyRow(v, u, k))}</tbody>
  </table></div>`
  }
</section>
<section class="card" aria-labelledby="password-title">
  <h2 id="password-title">${t("operators.password.heading")}</h2>
  <form method="post" action="/admin/users/${u.id}/password" class="row" data-confirm="${t("operators.password.confirm", { email: u.email })}">
    ${csrfField(v)}
    <label for="reset-password">${t("operators.password.label")}</label>
    <input id="reset-password" name="password" type="password" required minlength="${s.minPasswordLength}" autocomplete="new-password">
    <button type="submit" class="primary">${t("operators.password.submit")}</button>
  </form>
  <p class="muted">${t("operators.password.hint", { min: s.minPasswordLength })}</p>
</section>`,
  );
}
