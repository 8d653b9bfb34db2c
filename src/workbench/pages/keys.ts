/** API keys: create (the full key shown once), list, revoke with confirmation. */
import { MAX_KEY_NAME_CHARS } from "../../core/limits";
import type { ApiKeyRow } from "../../store/apiKeys";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { csrfField, message, page, type Viewer } from "../layout";

export interface KeysPageState {
  keys: ApiKeyRow[];
  created?: { name: string; secret: string } | null;
  error?: string | null;
  notice?: string | null;
}

function createdKey(t: Translator, c: { name: string; secret: string }): Html {
  // data-replace-url: common.js turns this POST answer into a plain /keys history entry, so a
  // reload does not post the form again (and create a second key).
  return html`<section class="card created-key" aria-labelledby="new-key-title" data-replace-url="/keys">
  <h2 id="new-key-title">${t("keys.created.heading", { name: c.name })}</h2>
  <p class="msg warning" role="alert">${t.html("keys.created.warning")}</p>
  <div class="copy-row">
    <label class="visually-hidden" for="new-key">${t("keys.created.label")}</label>
    <input id="new-key" class="mono" type="text" readonly value="${c.secret}" data-testid="new-key">
    <button type="button" class="primary" data-copy="#new-key">${t("common.copy")}</button>
  </div>
  <p class="muted">${t.html("keys.created.usage")}</p>
</section>`;
}

function keyRow(v: Viewer, k: ApiKeyRow): Html {
  const t = v.t;
  const active = k.revoked_at === null;
  return html`<tr>
  <td class="name">${k.name}</td>
  <td class="mono">${k.prefix}…</td>
  <td>${formatTime(k.created_at)}</td>
  <td>${formatTime(k.last_used_at)}</td>
  <td>${active ? html`<span class="status ok">${t("keys.status.active")}</span>` : html`<span class="status bad">${t("keys.status.revoked", { time: formatTime(k.revoked_at) })}</span>`}</td>
  <td>${
    active
      ? html`<form method="post" action="/keys/${k.id}/revoke" class="inline" data-confirm="${t("keys.revoke.confirm", { name: k.name })}">
      ${csrfField(v)}<button type="submit" class="danger small" aria-label="${t("keys.revoke.label", { name: k.name })}">${t("keys.revoke")}</button></form>`
      : ""
  }</td>
</tr>`;
}

export function keysPage(v: Viewer, s: KeysPageState): Html {
  const t = v.t;
  return page({
    title: t("keys.title"),
    section: "keys",
    viewer: v,
    body: html`<h1>${t("keys.title")}</h1>
${message("error", s.error)}${message("notice", s.notice)}
${s.created ? createdKey(t, s.created) : ""}
<section class="card">
  <h2>${t("keys.create.heading")}</h2>
  <form method="post" action="/keys" class="row">
    ${csrfField(v)}
    <label for="key-name">${t("keys.create.name")}</label>
    <input id="key-name" name="name" type="text" required maxlength="${MAX_KEY_NAME_CHARS}" placeholder="${t("keys.create.placeholder")}">
    <button type="submit" class="primary">${t("keys.create.submit")}</button>
  </form>
</section>
<section class="card">
  <h2>${t("keys.list.heading")}</h2>
  ${
    s.keys.length === 0
      ? html`<p class="muted">${t("keys.list.empty")}</p>`
      : html`<div class="table-wrap"><table>
    <thead><tr><th scope="col">${t("keys.col.name")}</th><th scope="col">${t("keys.col.prefix")}</th><th scope="col">${t("keys.col.created")}</th><th scope="col">${t("keys.col.lastUsed")}</th><th scope="col">${t("keys.col.status")}</th><th scope="col"><span class="visually-hidden">${t("keys.col.actions")}</span></th></tr></thead>
    <tbody>${s.keys.map((k) => keyRow(v, k))}</tbody>
  </table></div>`
  }
</section>`,
  });
}
