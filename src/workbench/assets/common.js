// Atelier workbench: behaviour shared by every page (copy buttons, confirmations, balance).
"use strict";
(function () {
  const replaceWith = document.querySelector("[data-replace-url]");
  if (replaceWith) history.replaceState(null, "", replaceWith.getAttribute("data-replace-url"));
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  window.atelier = {
    csrf: csrfMeta ? csrfMeta.getAttribute("content") : "",
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
        if (unit) unit.textContent = s.credits === 1 ? "credit" : "credits";
        return s.credits;
      } catch {
        return null;
      }
    },
  };

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
    button.textContent = copied ? "Copied ✓" : "Select and copy manually";
    setTimeout(() => (button.textContent = label), 2000);
  });

  // Forms with data-confirm ask before submitting (revoke, disable, make admin).
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (form instanceof HTMLFormElement && form.hasAttribute("data-confirm") && !window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });
})();
