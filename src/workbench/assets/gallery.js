// Atelier workbench: the gallery's "Copy link" buttons (data-copy-link="<signed path>").
"use strict";
(function () {
  document.addEventListener("click", async (event) => {
    const button = event.target instanceof Element ? event.target.closest("[data-copy-link]") : null;
    if (!button) return;
    const url = new URL(button.getAttribute("data-copy-link"), location.href).href;
    let copied = false;
    try {
      await navigator.clipboard.writeText(url);
      copied = true;
    } catch {
      // No clipboard permission (plain http, an old browser): let the user copy it by hand.
      window.prompt(window.atelier.t("gallery.copyLinkPrompt"), url);
    }
    button.setAttribute("data-copied", url);
    if (!copied) return;
    const label = button.textContent;
    button.textContent = window.atelier.t("common.copied");
    setTimeout(() => (button.textContent = label), 2000);
  });
})();
