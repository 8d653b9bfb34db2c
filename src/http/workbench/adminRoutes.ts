/** Admin pages: users (search, credits, disable/enable, make admin), all requests, pool, models. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { InsufficientCreditsError } from "../../store/credits";
import { adminModelsPage, adminRequestsPage, adminUpstreamsPage, adminUsersPage } from "../../workbench/pages/admin";
import { parseHistoryQuery, toFilter } from "../../workbench/pages/requests";
import type { Viewer } from "../../workbench/layout";
import type { UserRow } from "../../store/users";
import { formFields, htmlResponse, redirect, requireCsrf, requireViewer } from "./respond";
import { upstreamViews } from "./upstreamViews";

const hide = { detail: { hide: true } };

/** The users table shows this many; past it the page says so and search narrows it down. */
export const USERS_SHOWN = 200;

const NOTICES: Record<string, string> = {
  granted: "Credits granted.",
  deducted: "Credits deducted.",
  disabled: "The account is disabled; its sessions ended and its keys stop working.",
  enabled: "The account is enabled.",
  admin: "The user is now an admin.",
  demoted: "The user is no longer an admin.",
};

export function adminRoutes(services: Services) {
  const { store, clock, catalog, workbench } = services;
  const usersPage = (v: Viewer, search: string, extra: { error?: string | null; notice?: string | null }, status = 200) =>
    usersPageFor(v, store.users.list({ search, limit: USERS_SHOWN + 1 }), search, extra, status);
  const usersPageFor = (v: Viewer, found: UserRow[], search: string, extra: { error?: string | null; notice?: string | null }, status: number) =>
    htmlResponse(adminUsersPage(v, { users: found.slice(0, USERS_SHOWN), more: found.length > USERS_SHOWN, search, ...extra }), status);

  const targetUser = (raw: string) => {
    const id = Number(raw);
    return Number.isInteger(id) ? store.users.byId(id) : null;
  };

  return new Elysia({ name: "workbench.admin" })
    .get("/admin", ({ request, query }) => {
      const g = requireViewer(services, request, { admin: true });
      if (g.response) return g.response;
      const search = (query.q ?? "").slice(0, 254);
      return usersPage(g.viewer, search, { notice: NOTICES[query.done ?? ""] ?? null });
    }, hide)
    .post("/admin/users/:id/credits", ({ request, body, params }) => {
      const g = requireCsrf(services, request, body, { admin: true });
      if (g.response) return g.response;
      const f = formFields(body);
      const user = targetUser(params.id);
      if (!user) return usersPage(g.viewer, "", { error: "No such user." }, 404);
      const amount = Number(f.amount);
      if (!Number.isInteger(amount) || amount < 1 || amount > 1_000_000) {
        // Shown filtered to that user, so the row the error is about is on screen among many.
        return usersPage(g.viewer, user.email, { error: `Enter a whole number of credits from 1 to 1000000 for ${user.email}.` }, 400);
      }
      const note = (f.note ?? "").trim().slice(0, 200) || undefined;
      const actor = `admin:${g.viewer.user.email}`;
      if (f.op === "deduct") {
        try {
          store.credits.deduct(user.id, amount, clock(), note, actor);
        } catch (e) {
          if (e instanceof InsufficientCreditsError) {
            return usersPage(g.viewer, user.email, { error: `Cannot deduct ${amount}: ${user.email} has only ${user.credits} credits.` }, 400);
          }
          throw e;
        }
        return redirect("/admin?done=deducted");
      }
      if (f.op !== "grant") return usersPage(g.viewer, "", { error: "Choose Grant or Deduct." }, 400);
      store.credits.grant(user.id, amount, clock(), note, actor);
      return redirect("/admin?done=granted");
    }, hide)
    .post("/admin/users/:id/:action", ({ request, body, params }) => {
      const g = requireCsrf(services, request, body, { admin: true });
      if (g.response) return g.response;
      const user = targetUser(params.id);
      if (!user) return usersPage(g.viewer, "", { error: "No such user." }, 404);
      if (user.id === g.viewer.user.id) return usersPage(g.viewer, "", { error: "You cannot change your own account here." }, 400);
      switch (params.action) {
        case "disable":
          store.users.setDisabled(user.id, true);
          workbench.sessions.endAllFor(user.id);
          return redirect("/admin?done=disabled");
        case "enable":
          store.users.setDisabled(user.id, false);
          return redirect("/admin?done=enabled");
        case "admin":
          store.users.setRole(user.id, "admin");
          return redirect("/admin?done=admin");
        // Undoes "Make admin" (never on yourself, above: the last admin cannot demote themselves).
        case "demote":
          store.users.setRole(user.id, "user");
          return redirect("/admin?done=demoted");
        default:
          return usersPage(g.viewer, "", { error: "Unknown action." }, 404);
      }
    }, hide)
    .get("/admin/requests", ({ request, query }) => {
      const g = requireViewer(services, request, { admin: true });
      if (g.response) return g.response;
      const q = parseHistoryQuery(query);
      const rows = store.requests.list(toFilter(q));
      const emails = new Map<number, string>();
      for (const id of new Set(rows.map((r) => r.user_id))) emails.set(id, store.users.byId(id)?.email ?? `#${id}`);
      return htmlResponse(
        adminRequestsPage(g.viewer, {
          query: q,
          requests: rows,
          total: store.requests.count({ ...toFilter(q), limit: undefined, offset: undefined }),
          models: catalog.list().map((m) => m.id),
          emails,
        }),
      );
    }, hide)
    .get("/admin/upstreams", ({ request, query }) => {
      const g = requireViewer(services, request, { admin: true });
      if (g.response) return g.response;
      return htmlResponse(adminUpstreamsPage(g.viewer, upstreamViews(services), query.enabled ? "The account is enabled again." : null));
    }, hide)
    .post("/admin/upstreams/:upstream/accounts/:account/enable", ({ request, body, params }) => {
      const g = requireCsrf(services, request, body, { admin: true });
      if (g.response) return g.response;
      const upstream = services.config.upstreams.find((u) => u.id === params.upstream);
      if (!upstream || !upstream.accounts.some((a) => a.id === params.account)) {
        return htmlResponse(adminUpstreamsPage(g.viewer, upstreamViews(services)), 404);
      }
      store.upstreams.enableAccount(upstream.id, params.account);
      services.upstreams.get(upstream.id)?.refresh();
      return redirect("/admin/upstreams?enabled=1");
    }, hide)
    .get("/admin/models", ({ request }) => {
      const g = requireViewer(services, request, { admin: true });
      if (g.response) return g.response;
      return htmlResponse(adminModelsPage(g.viewer, catalog.list()));
    }, hide);
}
