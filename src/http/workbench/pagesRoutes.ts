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
/** The newest ledger rows in which a redemption's notice looks for the row it names. */
export const REDEEM_ROWS_SEARCHED = 20;

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
    .get("/credits", async ({ viewer, query }) => {
      // `redeemed` names the viewer's own ledger row of the redemption: the notice says what that
      // row credited, so a hand-made link cannot make the page claim credits that never came.
      const entryId = Number(query.redeemed);
      const row = Number.isInteger(entryId) ? (await services.store.credits.ledger(viewer.user.id, REDEEM_ROWS_SEARCHED)).find((l) => l.id === entryId && l.kind === "redeem") : undefined;
      const redeem = row ? { notice: viewer.t("codes.redeem.done", { count: row.amount }) } : undefined;
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
