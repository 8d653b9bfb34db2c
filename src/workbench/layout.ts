/** The page shell: head, the account bar (who, balance, API, language, sign out) and the navigation. */
import type { UserRow } from "../store/users";
import { html, jsonForScript, type Html, type Interpolation } from "./html";
import { LOCALE_NAMES, LOCALES, type MessageKey, type Translator } from "./i18n";

export interface Viewer {
  user: UserRow;
  csrf: string;
  /** The viewer's language (see i18n/locale.ts). */
  t: Translator;
}

export type Section = "playground" | "gallery" | "credits" | "keys" | "webhooks" | "admin" | "auth";

const NAV: { section: Section; href: string; label: Extract<MessageKey, `common.nav.${string}`>; admin?: boolean }[] = [
  { section: "playground", href: "/playground", label: "common.nav.playground" },
  { section: "gallery", href: "/gallery", label: "common.nav.gallery" },
  { section: "credits", href: "/credits", label: "common.nav.credits" },
  { section: "keys", href: "/keys", label: "common.nav.keys" },
  { section: "webhooks", href: "/webhooks", label: "common.nav.webhooks" },
  { section: "admin", href: "/admin", label: "common.nav.admin", admin: true },
];

/** A signed-in page takes its language from the viewer; a signed-out one passes `t` itself. */
export type PageOptions = {
  title: string;
  section: Section;
  body: Interpolation;
  /** Extra client scripts from /assets (our own constants). */
  scripts?: string[];
} & ({ viewer: Viewer; t?: undefined } | { viewer: null; t: Translator });

/**
 * The switch to the other language: a plain form (works without script and signed out), answered
 * with the `atelier_lang` cookie and a redirect back to the page it was on.
 */
function languageSwitch(t: Translator): Html {
  const other = LOCALES.find((l) => l !== t.locale)!;
  const name = LOCALE_NAMES[other];
  return html`<form method="post" action="/language" class="inline lang-switch">
      <input type="hidden" name="lang" value="${other}">
      <button type="submit" class="link" lang="${other}" title="${t("common.language.switchTo", { language: name })}" data-testid="language-switch">${name}</button>
    </form>`;
}

/**
 * The bar: brand, then one <details class="menu"> holding the navigation and the account. On wide
 * screens the stylesheet shows its content inline and hides the summary; on phones it is one row
 * (brand + "Menu") and the summary opens the links, with no script and keyboard-operable.
 */
function accountBar(v: Viewer, section: Section): Html {
  const t = v.t;
  const items = NAV.filter((n) => !n.admin || v.user.role === "admin");
  return html`<header class="bar">
  <a class="brand" href="/">Atelier</a>
  <details class="menu">
  <summary><span class="menu-icon" aria-hidden="true"></span>${t("common.menu")}</summary>
  <nav aria-label="${t("common.nav.label")}">
    <ul>${items.map((n) => html`<li><a href="${n.href}"${n.section === section ? html` aria-current="page"` : ""}>${t(n.label)}</a></li>`)}</ul>
  </nav>
  <div class="account" aria-label="${t("common.account.label")}">
    <span class="who-line"><span class="who" title="${v.user.email}"><span class="visually-hidden">${t("common.account.signedInAs")} </span>${v.user.email}</span>${v.user.role === "admin" ? html` <span class="badge">${t("common.account.adminBadge")}</span>` : ""}</span>
    <a class="balance" href="/credits" title="${t("common.account.balance")}"><span id="balance" data-balance="${v.user.credits}">${v.user.credits}</span> <span id="balance-unit">${t.plural("common.credits", v.user.credits)}</span></a>
    <a class="api" href="/keys">${t("common.account.api")}</a>
    ${languageSwitch(t)}
    <form method="post" action="/signout" class="inline">
      <input type="hidden" name="_csrf" value="${v.csrf}">
      <button type="submit" class="link">${t("common.account.signOut")}</button>
    </form>
  </div>
  </details>
</header>`;
}

function signedOutBar(t: Translator): Html {
  return html`<header class="bar"><a class="brand" href="/">Atelier</a><div class="bar-end">${languageSwitch(t)}</div></header>`;
}

export function page(o: PageOptions): Html {
  const t = o.viewer ? o.viewer.t : o.t;
  const scripts = o.scripts ?? [];
  return html`<!doctype html>
<html lang="${t.locale}">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  ${o.viewer ? html`<meta name="csrf-token" content="${o.viewer.csrf}">` : ""}
  <title>${o.title} — ${t("common.titleSuffix")}</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="/assets/workbench.css">
  <script type="application/json" id="atelier-messages">${jsonForScript(t.clientMessages(scripts))}</script>
  <script src="/assets/common.js" defer></script>
  ${scripts.map((s) => html`<script src="/assets/${s}" defer></script>`)}
</head>
<body>
  <a class="skip" href="#main">${t("common.skip")}</a>
  ${o.viewer ? accountBar(o.viewer, o.section) : signedOutBar(t)}
  <main id="main" tabindex="-1">
    ${o.body}
  </main>
</body>
</html>`;
}

/** A notice or error box; role=alert makes screen readers announce errors. */
export function message(kind: "error" | "notice", text: string | null | undefined): Html {
  if (!text) return html``;
  return kind === "error" ? html`<p class="msg error" role="alert">${text}</p>` : html`<p class="msg notice" role="status">${text}</p>`;
}

export function csrfField(v: Viewer): Html {
  return html`<input type="hidden" name="_csrf" value="${v.csrf}">`;
}
