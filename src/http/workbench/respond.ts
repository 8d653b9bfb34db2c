/** Small helpers the workbench routes share: HTML answers, redirects, form fields, problem pages. */
import { html, type Html } from "../../workbench/html";
import { page, type Viewer } from "../../workbench/layout";
import type { Translator } from "../../workbench/i18n";
import { metaOf } from "../requestMeta";

const SECURITY_HEADERS: Record<string, string> = {
  "content-type": "text/html; charset=utf-8",
  "cache-control": "no-store",
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  // Scripts and styles only from our own embedded assets; images also from data:/blob: (results, previews).
  "content-security-policy":
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
};

export function htmlResponse(body: Html, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(body.value, { status, headers: { ...SECURITY_HEADERS, ...headers } });
}

export function redirect(location: string, headers: Record<string, string> = {}): Response {
  return new Response(null, { status: 303, headers: { location, "cache-control": "no-store", ...headers } });
}

/** The string fields of a parsed form body (Elysia parses urlencoded and multipart bodies). */
export function formFields(body: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (body && typeof body === "object") {
    for (const [k, v] of Object.entries(body)) if (typeof v === "string") out[k] = v;
  }
  return out;
}

/** The socket's peer address; never a client-supplied header, which would let a guesser rotate addresses. */
export function clientAddress(request: Request): string {
  return metaOf(request).clientAddress?.() ?? "unknown";
}

/** A page that only says what went wrong; `who` is the viewer, or (signed out) the request's language. */
export function problemPage(who: Viewer | Translator, status: number, title: string, text: string): Response {
  const shell = typeof who === "function" ? { viewer: null, t: who } : { viewer: who };
  const t = typeof who === "function" ? who : who.t;
  return htmlResponse(
    page({ title, section: "auth", ...shell, body: html`<section class="card narrow"><h1>${title}</h1><p role="alert">${text}</p><p><a href="/">${t("common.back")}</a></p></section>` }),
    status,
  );
}

export function csrfRejected(t: Translator): Response {
  return problemPage(t, 403, t("common.csrf.title"), t("common.csrf.text"));
}

/** Only local paths as the post-sign-in destination (no open redirect). */
export function safeNext(next: string | undefined): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return "/playground";
  // A Location header takes printable ASCII only: a decoded CR/LF, space or "€" made the redirect a 500.
  return next.replace(/[^\x21-\x7e]/gu, (c) => encodeURIComponent(c));
}
