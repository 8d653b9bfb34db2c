/**
 * POST /language (the switch in the page header): remembers the language in a cookie, signed in
 * or not, and goes back to the page the form was on (its same-origin Referer, path and query
 * only; anything else goes to /).
 */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { isLocale } from "../../workbench/i18n";
import { workbenchGuards } from "./guards";
import { localeCookie } from "./locale";
import { formFields, redirect, safeNext } from "./respond";

const hide = { detail: { hide: true } };

/** The path and query of a Referer on the request's own host, or "/". */
function backFrom(request: Request): string {
  const referer = request.headers.get("referer");
  if (!referer) return "/";
  try {
    const from = new URL(referer);
    if (from.host !== new URL(request.url).host && from.host !== request.headers.get("host")) return "/";
    return safeNext(from.pathname + from.search);
  } catch {
    return "/";
  }
}

export function languageRoutes(services: Services) {
  return new Elysia({ name: "workbench.language" })
    .use(workbenchGuards(services))
    .post("/language", ({ request, body }) => {
      const lang = formFields(body).lang;
      if (!isLocale(lang)) return new Response("Unknown language", { status: 400, headers: { "content-type": "text/plain; charset=utf-8" } });
      return redirect(backFrom(request), { "set-cookie": localeCookie(lang, services.config, request) });
    }, { sameOrigin: true, ...hide });
}
