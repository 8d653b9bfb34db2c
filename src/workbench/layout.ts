/** The page shell: head, the account bar (who, balance, API, sign out) and the navigation. */
import type { UserRow } from "../store/users";
import { html, type Html, type Interpolation } from "./html";

export interface Viewer {
  user: UserRow;
  csrf: string;
}

export type Section = "playground" | "gallery" | "credits" | "keys" | "webhooks" | "admin" | "auth";

const NAV: { section: Section; href: string; label: string; admin?: boolean }[] = [
  { section: "playground", href: "/playground", label: "Playground" },
  { section: "gallery", href: "/gallery", label: "Gallery" },
  { section: "credits", href: "/credits", label: "Credits & history" },
  { section: "keys", href: "/keys", label: "API keys" },
  { section: "webhooks", href: "/webhooks", label: "Webhooks" },
  { section: "admin", href: "/admin", label: "Admin", admin: true },
];

export interface PageOptions {
  title: string;
  section: Section;
  viewer: Viewer | null;
  body: Interpolation;
  /** Extra client scripts from /assets (our own constants). */
  scripts?: string[];
}

/**
 * The bar: brand, then one <details class="menu"> holding the navigation and the account. On wide
 * screens the stylesheet shows its content inline and hides the summary; on phones it is one row
 * (brand + "Menu") and the summary opens the links, with no script and keyboard-operable.
 */
function accountBar(v: Viewer, section: Section): Html {
  const items = NAV.filter((n) => !n.admin || v.user.role === "admin");
  return html`<header class="bar">
  <a class="brand" href="/">Atelier</a>
  <details class="menu">
  <summary><span class="menu-icon" aria-hidden="true"></span>Menu</summary>
  <nav aria-label="Main">
    <ul>${items.map((n) => html`<li><a href="${n.href}"${n.section === section ? html` aria-current="page"` : ""}>${n.label}</a></li>`)}</ul>
  </nav>
  <div class="account" aria-label="Account">
    <span class="who-line"><span class="who" title="${v.user.email}"><span class="visually-hidden">Signed in as </span>${v.user.email}</span>${v.user.role === "admin" ? html` <span class="badge">admin</span>` : ""}</span>
    <a class="balance" href="/credits" title="Credit balance"><span id="balance" data-balance="${v.user.credits}">${v.user.credits}</span> <span id="balance-unit">${v.user.credits === 1 ? "credit" : "credits"}</span></a>
    <a class="api" href="/keys">API</a>
    <form method="post" action="/signout" class="inline">
      <input type="hidden" name="_csrf" value="${v.csrf}">
      <button type="submit" class="link">Sign out</button>
    </form>
  </div>
  </details>
</header>`;
}

export function page(o: PageOptions): Html {
  return html`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  ${o.viewer ? html`<meta name="csrf-token" content="${o.viewer.csrf}">` : ""}
  <title>${o.title} — Atelier</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="/assets/workbench.css">
  <script src="/assets/common.js" defer></script>
  ${(o.scripts ?? []).map((s) => html`<script src="/assets/${s}" defer></script>`)}
</head>
<body>
  <a class="skip" href="#main">Skip to content</a>
  ${o.viewer ? accountBar(o.viewer, o.section) : html`<header class="bar"><a class="brand" href="/">Atelier</a></header>`}
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
