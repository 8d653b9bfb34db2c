/** Admin pages: users (search, credits, disable/enable, make admin), all requests, pool, models, redemption codes. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { InsufficientCreditsError, type UserRow } from "../../core/store";
import { MAX_EMAIL_CHARS, MAX_CREDIT_GRANT } from "../../core/limits";
import { enableUpstreamAccount } from "../../core/upstreamAccounts";
import { adminModelsPage, adminRequestsPage, adminUpstreamsPage, adminUsersPage } from "../../workbench/pages/admin";
import { parseHistoryQuery, toFilter } from "../../workbench/pages/requests";
import type { Viewer } from "../../workbench/layout";
import type { MessageKey } from "../../workbench/i18n";
import { workbenchGuards } from "./guards";
import { formFields, htmlResponse, redirect } from "./respond";
import { upstreamViews } from "./upstreamViews";
import { upstreamIdOf, type CatalogModel } from "../../core/models";
import { BatchRejected } from "../../core/redemptionCodes";
import { adminCodesPage, type BatchForm } from "../../workbench/pages/adminCodes";

const hide = { detail: { hide: true } };

/** The users table shows this many; past it the page says so and search narrows it down. */
export const USERS_SHOWN = 200;

const NOTICES: Record<string, Extract<MessageKey, `admin.notice.${string}`>> = {
  granted: "admin.notice.granted",
  deducted: "admin.notice.deducted",
  disabled: "admin.notice.disabled",
  enabled: "admin.notice.enabled",
  admin: "admin.notice.admin",
  demoted: "admin.notice.demoted",
};

export function adminRoutes(services: Services) {
  const { store, clock, catalog, workbench } = services;
  const engineKindOf = (m: CatalogModel) => {
    const id = upstreamIdOf(m);
    return id === undefined ? "built-in" : (services.config.upstreams.find((u) => u.id === id)?.kind ?? "unknown");
  };
  const usersPage = (v: Viewer, search: string, extra: { error?: string | null; notice?: string | null }, status = 200) =>
    usersPageFor(v, store.users.list({ search, limit: USERS_SHOWN + 1 }), search, extra, status);
  const usersPageFor = (v: Viewer, found: UserRow[], search: string, extra: { error?: string | null; notice?: string | null }, status: number) =>
    htmlResponse(adminUsersPage(v, { users: found.slice(0, USERS_SHOWN), more: found.length > USERS_SHOWN, search, storage: store.images.usageByUser(), ...extra }), status);

  /**
   * The redirect after a grant or deduction names the ledger row it wrote (`user`, `entry`); the
   * notice is read back from that row, so it says whom and how much and a hand-made link cannot
   * make it claim a change that did not happen. Unknown rows fall back to the plain notice.
   */
  const LEDGER_ROWS_SEARCHED = 20;
  const creditNotice = (viewer: Viewer, query: Record<string, string | undefined>): string | null => {
    if (query.done !== "granted" && query.done !== "deducted") return null;
    const user = targetUser(query.user ?? "");
    const entryId = Number(query.entry);
    if (!user || !Number.isInteger(entryId)) return null;
    const row = store.credits.ledger(user.id, LEDGER_ROWS_SEARCHED).find((l) => l.id === entryId);
    if (!row || row.kind !== (query.done === "granted" ? "grant" : "deduct")) return null;
    const t = viewer.t;
    const n = Math.abs(row.amount);
    const params = { amount: n, credits: t.plural("common.credits", n), email: user.email, balance: user.credits, balanceCredits: t.plural("common.credits", user.credits) };
    return row.kind === "grant" ? t("admin.creditNotice.granted", params) : t("admin.creditNotice.deducted", params);
  };
  /** Where to go after a credit change: the users page, told which ledger row to describe. */
  const afterCreditChange = (done: "granted" | "deducted", userId: number) => {
    const entry = store.credits.ledger(userId, 1)[0];
    return redirect(`/admin?done=${done}&user=${userId}${entry ? `&entry=${entry.id}` : ""}`);
  };

  const targetUser = (raw: string) => {
    const id = Number(raw);
    return Number.isInteger(id) ? store.users.byId(id) : null;
  };

  return new Elysia({ name: "workbench.admin" })
    .use(workbenchGuards(services))
    .get("/admin", ({ viewer, query }) => {
      const search = (query.q ?? "").slice(0, MAX_EMAIL_CHARS);
      const notice = NOTICES[query.done ?? ""];
      return usersPage(viewer, search, { notice: creditNotice(viewer, query) ?? (notice ? viewer.t(notice) : null) });
    }, { admin: true, ...hide })
    .post("/admin/users/:id/credits", ({ viewer, body, params }) => {
      const f = formFields(body);
      const user = targetUser(params.id);
      if (!user) return usersPage(viewer, "", { error: viewer.t("admin.error.noUser") }, 404);
      const amount = Number(f.amount);
      if (!Number.isInteger(amount) || amount < 1 || amount > MAX_CREDIT_GRANT) {
        // Shown filtered to that user, so the row the error is about is on screen among many.
        return usersPage(viewer, user.email, { error: viewer.t("admin.error.amount", { max: MAX_CREDIT_GRANT, email: user.email }) }, 400);
      }
      const note = (f.note ?? "").trim().slice(0, 200) || undefined;
      const actor = `admin:${viewer.user.email}`;
      if (f.op === "deduct") {
        try {
          store.credits.deduct(user.id, amount, clock(), note, actor);
        } catch (e) {
          if (e instanceof InsufficientCreditsError) {
            return usersPage(viewer, user.email, { error: viewer.t("admin.error.insufficient", { amount, email: user.email, credits: user.credits }) }, 400);
          }
          throw e;
        }
        return afterCreditChange("deducted", user.id);
      }
      if (f.op !== "grant") return usersPage(viewer, "", { error: viewer.t("admin.error.op") }, 400);
      store.credits.grant(user.id, amount, clock(), note, actor);
      return afterCreditChange("granted", user.id);
    }, { admin: true, ...hide })
    .post("/admin/users/:id/:action", ({ viewer, params }) => {
      const user = targetUser(params.id);
      if (!user) return usersPage(viewer, "", { error: viewer.t("admin.error.noUser") }, 404);
      if (user.id === viewer.user.id) return usersPage(viewer, "", { error: viewer.t("admin.error.self") }, 400);
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
          return usersPage(viewer, "", { error: viewer.t("admin.error.action") }, 404);
      }
    }, { admin: true, ...hide })
    .get("/admin/requests", ({ viewer, query }) => {
      const q = parseHistoryQuery(query);
      const rows = store.requests.list(toFilter(q));
      const emails = new Map<number, string>();
      for (const id of new Set(rows.map((r) => r.user_id))) emails.set(id, store.users.byId(id)?.email ?? `#${id}`);
      return htmlResponse(
        adminRequestsPage(viewer, {
          query: q,
          requests: rows,
          total: store.requests.count({ ...toFilter(q), limit: undefined, offset: undefined }),
          models: catalog.list().map((m) => m.id),
          emails,
        }),
      );
    }, { admin: true, ...hide })
    .get("/admin/upstreams", ({ viewer, query }) =>
      htmlResponse(adminUpstreamsPage(viewer, upstreamViews(services), query.enabled ? viewer.t("admin.upstreams.enabled") : null)), { admin: true, ...hide })
    .post("/admin/upstreams/:upstream/accounts/:account/enable", ({ viewer, params }) => {
      const enabled = enableUpstreamAccount({ upstreams: services.config.upstreams, flags: store.upstreams, pools: services.upstreams }, params.upstream, params.account);
      if (!enabled.ok) return htmlResponse(adminUpstreamsPage(viewer, upstreamViews(services)), 404);
      return redirect("/admin/upstreams?enabled=1");
    }, { admin: true, ...hide })
    .get("/admin/models", ({ viewer }) => htmlResponse(adminModelsPage(viewer, catalog.list(), engineKindOf)), { admin: true, ...hide })
    .get("/admin/codes", ({ viewer }) => htmlResponse(adminCodesPage(viewer, { batches: workbench.codes.batches() }, clock())), { admin: true, ...hide })
    .post("/admin/codes", ({ viewer, body }) => {
      const f = formFields(body);
      const form: BatchForm = { name: f.name, credits: f.credits, count: f.count, expires_days: f.expires_days };
      const whole = (raw: string | undefined) => (raw !== undefined && /^\s*\d{1,12}\s*$/.test(raw) ? Number(raw) : Number.NaN);
      const days = (f.expires_days ?? "").trim() === "" ? null : whole(f.expires_days);
      try {
        const created = workbench.codes.createBatch({ name: f.name ?? "", credits: whole(f.credits), count: whole(f.count), expiresInDays: days, createdBy: `admin:${viewer.user.email}` });
        services.logger.info("redemption codes created", { batch_id: created.batch.id, codes: created.codes.length, credits: created.batch.credits, admin_id: viewer.user.id });
        // Rendered directly (not redirected): the codes exist only in this response.
        return htmlResponse(adminCodesPage(viewer, { batches: workbench.codes.batches(), created }, clock()), 201);
      } catch (e) {
        if (!(e instanceof BatchRejected)) throw e;
        return htmlResponse(adminCodesPage(viewer, { batches: workbench.codes.batches(), form, error: e.message }, clock()), 400);
      }
    }, { admin: true, ...hide });
}
