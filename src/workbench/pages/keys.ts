/** API keys: create (the full key shown once), list, revoke with confirmation. */
import { MAX_KEY_NAME_CHARS } from "../../core/limits";
import type { ApiKeyRow } from "../../store/apiKeys";
import { formatTime, html, type Html } from "../html";
import { csrfField, message, page, type Viewer } from "../layout";

export interface KeysPageState {
  keys: ApiKeyRow[];
  created?: { name: string; secret: string } | null;
  error?: string | null;
  notice?: string | null;
}

function createdKey(c: { name: string; secret: string }): Html {
  // data-replace-url: common.js turns this POST answer into a plain /keys history entry, so a
  // reload does not post the form again (and create a second key).
  return html`<section class="card created-key" aria-labelledby="new-key-title" data-replace-url="/keys">
  <h2 id="new-key-title">Your new key “${c.name}”</h2>
  <p class="msg warning" role="alert"><strong>Copy it now.</strong> This is the only time the full key is shown; we keep only a hash of it.</p>
  <div class="copy-row">
    <label class="visually-hidden" for="new-key">New API key</label>
    <input id="new-key" class="mono" type="text" readonly value="${c.secret}" data-testid="new-key">
    <button type="button" class="primary" data-copy="#new-key">Copy</button>
  </div>
  <p class="muted">Use it as <code>Authorization: Bearer &lt;key&gt;</code> with any OpenAI client; set its base URL to this server's <code>/v1</code>.</p>
</section>`;
}

function keyRow(v: Viewer, k: ApiKeyRow): Html {
  const active = k.revoked_at === null;
  return html`<tr>
  <td class="name">${k.name}</td>
  <td class="mono">${k.prefix}…</td>
  <td>${formatTime(k.created_at)}</td>
  <td>${formatTime(k.last_used_at)}</td>
  <td>${active ? html`<span class="status ok">active</span>` : html`<span class="status bad">revoked ${formatTime(k.revoked_at)}</span>`}</td>
  <td>${
    active
      ? html`<form method="post" action="/keys/${k.id}/revoke" class="inline" data-confirm="Revoke the key “${k.name}”? Programs using it will get 401 at once.">
      ${csrfField(v)}<button type="submit" class="danger small" aria-label="Revoke key ${k.name}">Revoke</button></form>`
      : ""
  }</td>
</tr>`;
}

export function keysPage(v: Viewer, s: KeysPageState): Html {
  return page({
    title: "API keys",
    section: "keys",
    viewer: v,
    body: html`<h1>API keys</h1>
${message("error", s.error)}${message("notice", s.notice)}
${s.created ? createdKey(s.created) : ""}
<section class="card">
  <h2>Create a key</h2>
  <form method="post" action="/keys" class="row">
    ${csrfField(v)}
    <label for="key-name">Name</label>
    <input id="key-name" name="name" type="text" required maxlength="${MAX_KEY_NAME_CHARS}" placeholder="e.g. laptop script">
    <button type="submit" class="primary">Create key</button>
  </form>
</section>
<section class="card">
  <h2>Your keys</h2>
  ${
    s.keys.length === 0
      ? html`<p class="muted">No keys yet.</p>`
      : html`<div class="table-wrap"><table>
    <thead><tr><th scope="col">Name</th><th scope="col">Prefix</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col">Status</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
    <tbody>${s.keys.map((k) => keyRow(v, k))}</tbody>
  </table></div>`
  }
</section>`,
  });
}
