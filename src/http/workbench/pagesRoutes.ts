/** Credits & history, the playground, and a small JSON view of the session for client scripts. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { creditsPage } from "../../workbench/pages/credits";
import { playgroundPage } from "../../workbench/pages/playground";
import { parseHistoryQuery, toFilter } from "../../workbench/pages/requests";
import { htmlResponse, requireViewer, viewerOf } from "./respond";

const hide = { detail: { hide: true } };

export function pagesRoutes(services: Services) {
  const { store, catalog } = services;
  return new Elysia({ name: "workbench.pages" })
    .get("/credits", ({ request, query }) => {
      const g = requireViewer(services, request);
      if (g.response) return g.response;
      const userId = g.viewer.user.id;
      const q = parseHistoryQuery(query);
      return htmlResponse(
        creditsPage(g.viewer, {
          query: q,
          requests: store.requests.list(toFilter(q, userId)),
          total: store.requests.count({ ...toFilter(q, userId), limit: undefined, offset: undefined }),
          models: catalog.list().map((m) => m.id),
          ledger: store.credits.ledger(userId, 100),
        }),
      );
    }, hide)
    .get("/playground", ({ request }) => {
      const g = requireViewer(services, request);
      if (g.response) return g.response;
      return htmlResponse(playgroundPage(g.viewer, catalog.list(), catalog.defaultImageModel));
    }, hide)
    // The account bar refreshes the balance from here after a generation (same origin, cookie only).
    .get("/session", ({ request }) => {
      const v = viewerOf(services, request);
      const headers = { "content-type": "application/json", "cache-control": "no-store" };
      if (!v) return new Response(JSON.stringify({ signed_in: false }), { status: 401, headers });
      return new Response(JSON.stringify({ signed_in: true, email: v.user.email, role: v.user.role, credits: v.user.credits }), { headers });
    }, hide);
}
