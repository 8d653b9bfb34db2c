/**
 * API keys: create (the full key shown once, with ready-to-copy code), list with each key's
 * spend and limits, edit a key's name and limits on its own page, revoke with confirmation.
 */
import { MAX_KEY_CREDIT_CAP, MAX_KEY_NAME_CHARS } from "../../core/limits";
import { expiryDay, isKeyExpired, parseAllowedModels } from "../../core/keyLimits";
import type { ApiKeyWithSpend } from "../../store/apiKeys";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { csrfField, message, page, type Viewer } from "../layout";
import type { Snippet } from "./keySnippets";

export interface ModelChoice {
  id: string;
  kind: "image" | "chat";
}

export interface CreatedKey {
  name: string;
  secret: string;
  snippets: Snippet[];
}

export interface KeysPageState {
  keys: ApiKeyWithSpend[];
  models: ModelChoice[];
  now: number;
  created?: CreatedKey | null;
  error?: string | null;
  notice?: string | null;
}

function createdKey(t: Translator, c: CreatedKey): Html {
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
  <p class="muted">${t.html("keys.created.docs")}</p>
  <h3>${t("keys.created.tryIt")}</h3>
  <div class="snippets">${c.snippets.map(
    (s) => html`<div class="snippet">
    <div class="snippet-head"><label for="snippet-${s.id}">${s.label}</label><button type="button" class="small" data-copy="#snippet-${s.id}" aria-label="${t("keys.snippet.copy", { label: s.label })}">${t("common.copy")}</button></div>
    <textarea id="snippet-${s.id}" class="mono" readonly rows="${s.code.split("\n").length}" spellcheck="false" data-testid="snippet-${s.id}">${s.code}</textarea>
  </div>`,
  )}</div>
</section>`;
}

/** The name, expiry, cap and model fields, shared by the create form and the edit page. */
function settingsFields(t: Translator, models: ModelChoice[], current: { name: string; expiresAt: number | null; creditCap: number | null; allowedModels: string[] | null }, idPrefix: string): Html {
  const chosen = new Set(current.allowedModels ?? []);
  return html`<div class="key-settings">
    <div class="field">
      <label for="${idPrefix}-name">${t("keys.create.name")}</label>
      <input id="${idPrefix}-name" name="name" type="text" required maxlength="${MAX_KEY_NAME_CHARS}" placeholder="${t("keys.create.placeholder")}" value="${current.name}">
    </div>
    <div class="field">
      <label for="${idPrefix}-expires">${t("keys.field.expires")} <span class="muted">${t("keys.field.expiresHint")}</span></label>
      <input id="${idPrefix}-expires" name="expires_on" type="date" value="${expiryDay(current.expiresAt)}">
    </div>
    <div class="field">
      <label for="${idPrefix}-cap">${t("keys.field.cap")} <span class="muted">${t("keys.field.capHint")}</span></label>
      <input id="${idPrefix}-cap" name="credit_cap" type="number" min="0" max="${MAX_KEY_CREDIT_CAP}" step="1" inputmode="numeric" value="${current.creditCap ?? ""}">
    </div>
    <fieldset class="field models">
      <legend>${t("keys.field.models")} <span class="muted">${t("keys.field.modelsHint")}</span></legend>
      ${models.map(
        (m) => html`<label class="check-inline"><input type="checkbox" name="models" value="${m.id}"${chosen.has(m.id) ? html` checked` : ""}> <span class="mono">${m.id}</span> <span class="muted">${t(`history.kind.${m.kind}`)}</span></label>`,
      )}
    </fieldset>
  </div>`;
}

function spend(t: Translator, k: ApiKeyWithSpend): Html {
  if (k.credit_cap === null) return html`<span data-testid="key-spend">${k.credits_spent}</span>`;
  const reached = k.credits_spent >= k.credit_cap;
  return html`<span data-testid="key-spend">${k.credits_spent} / ${k.credit_cap}</span>${reached ? html` <span class="status warn">${t("keys.capReached")}</span>` : ""}`;
}

function status(t: Translator, k: ApiKeyWithSpend, now: number): Html {
  if (k.revoked_at !== null) return html`<span class="status bad">${t("keys.status.revoked", { time: formatTime(k.revoked_at) })}</span>`;
  if (isKeyExpired({ expiresAt: k.expires_at }, now)) return html`<span class="status bad">${t("keys.status.expired")}</span>`;
  return html`<span class="status ok">${t("keys.status.active")}</span>`;
}

function keyRow(v: Viewer, k: ApiKeyWithSpend, now: number): Html {
  const t = v.t;
  const active = k.revoked_at === null;
  const models = parseAllowedModels(k.allowed_models);
  return html`<tr data-key-id="${k.id}">
  <td class="name">${k.name}</td>
  <td class="mono nowrap">${k.prefix}…</td>
  <td class="num nowrap">${spend(t, k)}</td>
  <td class="nowrap">${k.expires_at === null ? html`<span class="muted">${t("keys.never")}</span>` : expiryDay(k.expires_at)}</td>
  <td class="models-cell">${models === null ? html`<span class="muted">${t("keys.allModels")}</span>` : models.map((m, i) => html`${i > 0 ? ", " : ""}<span class="mono">${m}</span>`)}</td>
  <td class="nowrap">${formatTime(k.created_at)}</td>
  <td class="nowrap">${formatTime(k.last_used_at)}</td>
  <td>${status(t, k, now)}</td>
  <td class="actions">${
    active
      ? html`<a class="button small" href="/keys/${k.id}" aria-label="${t("keys.edit.label", { name: k.name })}">${t("keys.edit")}</a>
      <form method="post" action="/keys/${k.id}/revoke" class="inline" data-confirm="${t("keys.revoke.confirm", { name: k.name })}">
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
  <form method="post" action="/keys" class="stack key-form">
    ${csrfField(v)}
    ${settingsFields(t, s.models, { name: "", expiresAt: null, creditCap: null, allowedModels: null }, "key")}
    <button type="submit" class="primary">${t("keys.create.submit")}</button>
  </form>
  <p class="muted">${t.html("keys.create.help")}</p>
</section>
<section class="card">
  <h2>${t("keys.list.heading")}</h2>
  ${
    s.keys.length === 0
      ? html`<p class="muted">${t("keys.list.empty")}</p>`
      : html`<div class="table-wrap"><table class="keys">
    <thead><tr><th scope="col">${t("keys.col.name")}</th><th scope="col">${t("keys.col.prefix")}</th><th scope="col" class="num">${t("keys.col.spent")}</th><th scope="col">${t("keys.col.expires")}</th><th scope="col">${t("keys.col.models")}</th><th scope="col">${t("keys.col.created")}</th><th scope="col">${t("keys.col.lastUsed")}</th><th scope="col">${t("keys.col.status")}</th><th scope="col"><span class="visually-hidden">${t("keys.col.actions")}</span></th></tr></thead>
    <tbody>${s.keys.map((k) => keyRow(v, k, s.now))}</tbody>
  </table></div>`
  }
</section>`,
  });
}

export interface KeyEditState {
  key: ApiKeyWithSpend;
  models: ModelChoice[];
  error?: string | null;
}

export function keyEditPage(v: Viewer, s: KeyEditState): Html {
  const t = v.t;
  const k = s.key;
  const current = { name: k.name, expiresAt: k.expires_at, creditCap: k.credit_cap, allowedModels: parseAllowedModels(k.allowed_models) };
  return page({
    title: t("keys.edit.title", { name: k.name }),
    section: "keys",
    viewer: v,
    body: html`<p><a href="/keys">${t("keys.edit.back")}</a></p>
<h1>${t("keys.edit.title", { name: k.name })}</h1>
${message("error", s.error)}
<section class="card">
  <dl class="kv">
    <dt>${t("keys.edit.prefix")}</dt><dd class="mono">${k.prefix}…</dd>
    <dt>${t("keys.edit.spent")}</dt><dd>${t.plural("keys.edit.spentValue", k.credits_spent)}${k.credit_cap === null ? "" : t("keys.edit.ofCap", { cap: k.credit_cap })}</dd>
    <dt>${t("keys.edit.created")}</dt><dd>${formatTime(k.created_at)}</dd>
    <dt>${t("keys.edit.lastUsed")}</dt><dd>${formatTime(k.last_used_at)}</dd>
  </dl>
</section>
<section class="card">
  <h2>${t("keys.edit.heading")}</h2>
  <form method="post" action="/keys/${k.id}" class="stack key-form">
    ${csrfField(v)}
    ${settingsFields(t, s.models, current, "edit")}
    <button type="submit" class="primary">${t("keys.edit.save")}</button>
  </form>
  <p class="muted">${t.html("keys.edit.help")}</p>
</section>`,
  });
}
