// Atelier workbench: behaviour shared by every page (copy buttons, confirmations, balance).
"use strict";
(function () {
  const replaceWith = document.querySelector("[data-replace-url]");
  if (replaceWith) history.replaceState(null, "", replaceWith.getAttribute("data-replace-url"));
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  // The page's language: the server puts this page's script messages in #atelier-messages.
  let messages = {};
  try {
    messages = JSON.parse(document.getElementById("atelier-messages")?.textContent || "{}");
  } catch {
    messages = {};
  }
  /** A message by key (`<script>.<name>`, e.g. "playground.generating") with `{param}`s filled in. */
  function t(key, params) {
    const text = Object.prototype.hasOwnProperty.call(messages, key) ? messages[key] : key;
    return params ? text.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole)) : text;
  }
  /** `<key>.one` for 1, else `<key>.other`, with `{count}` (both languages here pluralize no further). */
  function plural(key, count, params) {
    return t(`${key}.${count === 1 ? "one" : "other"}`, { ...params, count });
  }
  window.atelier = {
    csrf: csrfMeta ? csrfMeta.getAttribute("content") : "",
    t,
    plural,
    /** Re-reads the balance into the account bar; returns it (or null). */
    async refreshBalance() {
      try {
        const res = await fetch("/session", { credentials: "same-origin", cache: "no-store" });
        if (!res.ok) return null;
        const s = await res.json();
        const el = document.getElementById("balance");
        if (el) {
          el.textContent = String(s.credits);
          el.setAttribute("data-balance", String(s.credits));
        }
        const unit = document.getElementById("balance-unit");
        if (unit) unit.textContent = plural("common.credits", s.credits);
        return s.credits;
      } catch {
        return null;
      }
    },
  };

  // Phone tables: each cell's label (the stylesheet shows it before the value) is its column's
  // header text, unless the cell has its own data-label. Hidden headers (actions) label nothing.
  for (const table of document.querySelectorAll(".table-wrap > table")) {
    const headers = Array.from(table.querySelectorAll(":scope > thead > tr > th"), (th) =>
      th.querySelector(".visually-hidden") && th.textContent.trim() === th.querySelector(".visually-hidden").textContent.trim() ? "" : th.textContent.trim(),
    );
    if (headers.length === 0) continue;
    for (const row of table.querySelectorAll(":scope > tbody > tr")) {
      Array.from(row.children).forEach((cell, i) => {
        if (!cell.hasAttribute("data-label")) cell.setAttribute("data-label", headers[i] ?? "");
      });
    }
  }

  // The header menu is a <details>; where the browser cannot show a closed one's content inline
  // (no ::details-content), keep it open on wide screens, where the stylesheet hides its summary.
  const menu = document.querySelector("header .menu");
  if (menu instanceof HTMLDetailsElement && !CSS.supports("selector(::details-content)")) {
    const wide = window.matchMedia("(min-width: 641px)");
    const sync = () => (menu.open = wide.matches);
    sync();
    wide.addEventListener("change", sync);
  }

  // Copy buttons: data-copy="<selector of an input>".
  document.addEventListener("click", async (event) => {
    const button = event.target instanceof Element ? event.target.closest("[data-copy]") : null;
    if (!button) return;
    const input = document.querySelector(button.getAttribute("data-copy"));
    if (!input) return;
    let copied = false;
    try {
      await navigator.clipboard.writeText(input.value);
      copied = true;
    } catch {
      input.select();
      copied = document.execCommand("copy");
    }
    const label = button.textContent;
    button.textContent = copied ? t("common.copied") : t("common.copyManually");
    setTimeout(() => (button.textContent = label), 2000);
  });

  // Forms with data-confirm ask before submitting (revoke, disable, make admin).
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (form instanceof HTMLFormElement && form.hasAttribute("data-confirm") && !window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
      return;
    }
    // Signing out forgets what the playground kept in this tab: its conversations
    // (atelier.chat.<user id>) and the running request's form (atelier.playground.task.<user id>).
    if (form instanceof HTMLFormElement && form.getAttribute("action") === "/signout") {
      try {
        for (const key of Object.keys(sessionStorage)) if (key.startsWith("atelier.chat.") || key.startsWith("atelier.playground.")) sessionStorage.removeItem(key);
      } catch { /* storage off: nothing kept */ }
    }
  });
})();
