/** Small helpers the workbench routes share: HTML answers, redirects, form fields, guards. */
import type { Services } from "../../services";
import { html, type Html } from "../../workbench/html";
import { page, type Viewer } from "../../workbench/layout";
import { isSameOrigin, tokensEqual } from "./origin";
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
  return metaOf(request).clientAddress ?? "unknown";
}

export function problemPage(viewer: Viewer | null, status: number, title: string, text: string): Response {
  return htmlResponse(
    page({ title, section: "auth", viewer, body: html`<section class="card narrow"><h1>${title}</h1><p role="alert">${text}</p><p><a href="/">Back to the workbench</a></p></section>` }),
    status,
  );
}

/** The signed-in viewer, or null. */
export function viewerOf(services: Services, request: Request): Viewer | null {
  const s = services.workbench.sessions.current(request);
  if (!s) return null;
  metaOf(request).userId = s.user.id;
  return { user: s.user, csrf: s.csrf_token };
}

export type Guarded = { viewer: Viewer; response?: undefined } | { viewer?: undefined; response: Response };

/** Pages need a session: otherwise back to sign-in (GET) or 403 (POST). */
export function requireViewer(services: Services, request: Request, opts: { admin?: boolean } = {}): Guarded {
  const viewer = viewerOf(services, request);
  if (!viewer) {
    if (request.method === "GET") return { response: redirect(`/signin?next=${encodeURIComponent(new URL(request.url).pathname)}`) };
    return { response: problemPage(null, 403, "Signed out", "Your session has ended. Sign in again.") };
  }
  if (opts.admin && viewer.user.role !== "admin") return { response: problemPage(viewer, 403, "Admins only", "This page is for administrators.") };
  return { viewer };
}

/**
 * A state-changing form post from a signed-in page: same origin and the session's token in the
 * `_csrf` field. Returns the viewer or the refusal to send.
 */
export function requireCsrf(services: Services, request: Request, body: unknown, opts: { admin?: boolean } = {}): Guarded {
  if (!isSameOrigin(request, services.config)) return { response: csrfRejected() };
  const guarded = requireViewer(services, request, opts);
  if (guarded.response) return guarded;
  if (!tokensEqual(formFields(body)._csrf, guarded.viewer.csrf)) return { response: csrfRejected() };
  return guarded;
}

export function csrfRejected(): Response {
  return problemPage(null, 403, "Request rejected", "This form did not come from this workbench (missing or wrong CSRF token, or another origin). Reload the page and try again.");
}

/** Only local paths as the post-sign-in destination (no open redirect). */
export function safeNext(next: string | undefined): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return "/playground";
  // A Location header takes printable ASCII only: a decoded CR/LF, space or "€" made the redirect a 500.
  return next.replace(/[^\x21-\x7e]/gu, (c) => encodeURIComponent(c));
}
