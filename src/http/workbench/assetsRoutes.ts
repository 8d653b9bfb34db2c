/** Serves the embedded workbench assets with ETags (no CDN, works offline). */
import { Elysia } from "elysia";
import { ASSETS } from "../../workbench/assets";

export function assetsRoutes() {
  return new Elysia({ name: "workbench.assets" }).get("/assets/:name", ({ params, request }) => {
    // Own names only: `constructor`, `__proto__` or `toString` are properties of every object.
    const a = Object.hasOwn(ASSETS, params.name) ? ASSETS[params.name] : undefined;
    if (!a) return new Response("Not found", { status: 404, headers: { "content-type": "text/plain; charset=utf-8" } });
    const headers = { "content-type": a.type, etag: a.etag, "cache-control": "no-cache", "x-content-type-options": "nosniff" };
    if (request.headers.get("if-none-match") === a.etag) return new Response(null, { status: 304, headers });
    return new Response(a.body, { headers });
  }, { detail: { hide: true } });
}
