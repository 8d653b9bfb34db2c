/** Credits & history, the playground, and a small JSON view of the session for client scripts. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { creditsPage } from "../../workbench/pages/credits";
import { playgroundPage } from "../../workbench/pages/playground";
import { PAGE_SIZE, parseHistoryQuery, toFilter } from "../../workbench/pages/requests";
import { viewerOf, workbenchGuards } from "./guards";
import { htmlResponse } from "./respond";
import type { Viewer } from "../../workbench/layout";
import type { RedeemState } from "../../workbench/pages/redeem";

const hide = { detail: { hide: true } };

/** The credits page for the viewer (with a code's redemption outcome, if any). */
export async function creditsPageResponse(services: Services, viewer: Viewer, query: Record<string, string | undefined>, redeem?: RedeemState, status = 200): Promise<Response> {
  const { store, catalog } = services;
  const userId = viewer.user.id;
  const q = parseHistoryQuery(query);
  const filter = toFilter(q, userId);
  const history = await store.requests.historyPage(filter, q.at, PAGE_SIZE);
  const imageRequests = history.rows.filter((r) => r.kind === "image" && r.status === "succeeded").map((r) => r.id);
  return htmlResponse(
    creditsPage(viewer, {
      query: q,
      history,
      images: await store.images.imageIdsForRequests(userId, imageRequests, services.clock()),
      total: await store.requests.historyTotal(filter),
      models: catalog.list().map((m) => m.id),
      ledger: await store.credits.ledger(userId, 100),
      redeem,
    }),
    status,
  );
}

export function pagesRoutes(services: Services) {
  const { catalog } = services;
  return new Elysia({ name: "workbench.pages" })
    .use(workbenchGuards(services))
    .get("/credits", ({ viewer, query }) => {
      const redeemed = Number(query.redeemed);
      const redeem = Number.isInteger(redeemed) && redeemed > 0 ? { notice: viewer.t("codes.redeem.done", { count: redeemed }) } : undefined;
      return creditsPageResponse(services, viewer, query, redeem);
    }, { viewer: true, ...hide })
    .get("/playground", ({ viewer }) => htmlResponse(playgroundPage(viewer, catalog.list(), catalog.defaultImageModel, (m) => services.engines.imageEngine(m)?.editKeepsImageSize === true)), { viewer: true, ...hide })
    // The account bar refreshes the balance from here after a generation (same origin, cookie only).
    .get("/session", async ({ request }) => {
      const v = await viewerOf(services, request);
      const headers = { "content-type": "application/json", "cache-control": "no-store" };
      if (!v) return new Response(JSON.stringify({ signed_in: false }), { status: 401, headers });
      return new Response(JSON.stringify({ signed_in: true, email: v.user.email, role: v.user.role, credits: v.user.credits }), { headers });
    }, hide);
}
