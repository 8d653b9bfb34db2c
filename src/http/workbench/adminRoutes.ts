/** Admin pages: users (search, credits, disable/enable, make admin), all requests, pool, models, redemption codes. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { EmailTakenError, InsufficientCreditsError, type UserRow } from "../../core/store";
import { AccountError, addUser, hashPassword } from "../../core/accounts";
import { adminUserPage, createUserCard, type NewUserForm } from "../../workbench/pages/adminUser";
import { MAX_EMAIL_CHARS, MAX_CREDIT_GRANT } from "../../core/limits";
import { enableUpstreamAccount } from "../../core/upstreamAccounts";
import { adminModelsPage, adminUpstreamsPage, adminUsersPage } from "../../workbench/pages/admin";
import { adminFilter, adminRequestsPage, parseAdminRequestsQuery } from "../../workbench/pages/adminRequests";
import { PAGE_SIZE } from "../../workbench/pages/requests";
import type { Viewer } from "../../workbench/layout";
import type { MessageKey } from "../../workbench/i18n";
import { accountProblemText } from "./accountProblems";
import { workbenchGuards } from "./guards";
import { formFields, htmlResponse, redirect } from "./respond";
import { upstreamViews } from "./upstreamViews";
import { upstreamIdOf, type CatalogModel } from "../../core/models";
import { BatchRejected } from "../../core/redemptionCodes";
import { batchProblemText } from "./batchProblems";
import { adminCodesPage, type BatchForm } from "../../workbench/pages/adminCodes";

const hide = { detail: { hide: true } };

/** The users table shows this many; past it the page says so and search narrows it down. */
export const USERS_SHOWN = 200;

const USER_NOTICES: Record<string, Extract<MessageKey, `operators.notice.${string}`>> = {
  created: "operators.notice.created",
  password: "operators.notice.password",
  revoked: "operators.notice.revoked",
};

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
  const minPasswordLength = services.config.workbench.min_password_length;
  type Extra = { error?: string | null; notice?: string | null; form?: NewUserForm };
  const usersPage = async (v: Viewer, search: string, extra: Extra, status = 200) =>
    usersPageFor(v, await store.users.list({ search, limit: USERS_SHOWN + 1 }), search, extra, status);
  const usersPageFor = async (v: Viewer, found: UserRow[], search: string, { form, ...extra }: Extra, status: number) => {
    const users = found.slice(0, USERS_SHOWN);
    const spent = await store.requests.spentByUsers(users.map((u) => u.id));
    const createUser = createUserCard(v, minPasswordLength, form);
    return htmlResponse(adminUsersPage(v, { users, more: found.length > USERS_SHOWN, search, storage: await store.images.usageByUser(), spent, createUser, ...extra }), status);
  };
  const userPage = async (v: Viewer, user: UserRow, extra: { error?: string | null; notice?: string | null } = {}, status = 200) =>
    htmlResponse(
      adminUserPage(v, {
        user,
        keys: await store.keys.listWithSpend(user.id),
        spent: (await store.requests.spentByUsers([user.id])).get(user.id) ?? 0,
        usage: (await store.images.usageByUser()).get(user.id),
        minPasswordLength,
        ...extra,
      }),
      status,
    );

  /**
   * The redirect after a grant or deduction names the ledger row it wrote (`user`, `entry`); the
   * notice is read back from that row, so it says whom and how much and a hand-made link cannot
   * make it claim a change that did not happen. Unknown rows fall back to the plain notice.
   */
  const LEDGER_ROWS_SEARCHED = 20;
  const creditNotice = async (viewer: Viewer, query: Record<string, string | undefined>): Promise<string | null> => {
    if (query.done !== "granted" && query.done !== "deducted") return null;
    const user = await targetUser(query.user ?? "");
    const entryId = Number(query.entry);
    if (!user || !Number.isInteger(entryId)) return null;
    const row = (await store.credits.ledger(user.id, LEDGER_ROWS_SEARCHED)).find((l) => l.id === entryId);
    if (!row || row.kind !== (query.done === "granted" ? "grant" : "deduct")) return null;
    const t = viewer.t;
    const n = Math.abs(row.amount);
    const params = { amount: n, credits: t.plural("common.credits", n), email: user.email, balance: user.credits, balanceCredits: t.plural("common.credits", user.credits) };
    return row.kind === "grant" ? t("admin.creditNotice.granted", params) : t("admin.creditNotice.deducted", params);
  };
  /** Where to go after a credit change: the users page, told which ledger row to describe. */
  const afterCreditChange = async (done: "granted" | "deducted", userId: number) => {
    const entry = (await store.credits.ledger(userId, 1))[0];
    return redirect(`/admin?done=${done}&user=${userId}${entry ? `&entry=${entry.id}` : ""}`);
  };

  const targetUser = async (raw: string) => {
    const id = Number(raw);
    return Number.isInteger(id) ? store.users.byId(id) : null;
  };

  return new Elysia({ name: "workbench.admin" })
    .use(workbenchGuards(services))
    .get("/admin", async ({ viewer, query }) => {
      const search = (query.q ?? "").slice(0, MAX_EMAIL_CHARS);
      const notice = NOTICES[query.done ?? ""];
      return usersPage(viewer, search, { notice: (await creditNotice(viewer, query)) ?? (notice ? viewer.t(notice) : null) });
    }, { admin: true, ...hide })
    .post("/admin/users", async ({ viewer, body }) => {
      const t = viewer.t;
      const f = formFields(body);
      const form: NewUserForm = { email: (f.email ?? "").slice(0, MAX_EMAIL_CHARS), credits: f.credits, role: f.role };
      const refuse = (error: string) => usersPage(viewer, "", { error, form }, 400);
      // Sign-up's rule and its words (core/signIn), as the sign-up page shows them.
      const weak = workbench.signIn.passwordProblem(f.password ?? "");
      if (weak) return refuse(accountProblemText(t, weak.problem, services.config.workbench.min_password_length));
      const credits = (f.credits ?? "").trim() === "" ? 0 : Number(f.credits);
      if (!Number.isInteger(credits) || credits < 0 || credits > MAX_CREDIT_GRANT) return refuse(t("operators.create.badCredits", { max: MAX_CREDIT_GRANT }));
      if (f.role !== "user" && f.role !== "admin") return refuse(t("operators.create.badRole"));
      try {
        const user = await addUser(store, clock, { email: form.email ?? "", password: f.password, role: f.role, credits, actor: `admin:${viewer.user.email}` });
        services.logger.info("user created by an admin", { user_id: user.id, admin_id: viewer.user.id });
        return redirect(`/admin/users/${user.id}?done=created`);
      } catch (e) {
        if (e instanceof AccountError) return refuse(t("operators.create.badEmail"));
        if (e instanceof EmailTakenError) return refuse(t("operators.create.taken", { email: form.email ?? "" }));
        throw e;
      }
    }, { admin: true, ...hide })
    .get("/admin/users/:id", async ({ viewer, params, query }) => {
      const user = await targetUser(params.id);
      if (!user) return usersPage(viewer, "", { error: viewer.t("admin.error.noUser") }, 404);
      const notice = USER_NOTICES[query.done ?? ""];
      return userPage(viewer, user, { notice: notice ? viewer.t(notice) : null });
    }, { admin: true, ...hide })
    .post("/admin/users/:id/password", async ({ viewer, params, body }) => {
      const user = await targetUser(params.id);
      if (!user) return usersPage(viewer, "", { error: viewer.t("admin.error.noUser") }, 404);
      const password = formFields(body).password ?? "";
      const weak = workbench.signIn.passwordProblem(password);
      if (weak) return userPage(viewer, user, { error: accountProblemText(viewer.t, weak.problem, services.config.workbench.min_password_length) }, 400);
      await store.users.setPasswordHash(user.id, await hashPassword(password));
      // Whoever knew the old password is signed out everywhere (the admin too, on their own account).
      await workbench.sessions.endAllFor(user.id);
      services.logger.info("password set by an admin", { user_id: user.id, admin_id: viewer.user.id });
      return redirect(`/admin/users/${user.id}?done=password`);
    }, { admin: true, ...hide })
    .post("/admin/users/:id/keys/:key/revoke", async ({ viewer, params }) => {
      const user = await targetUser(params.id);
      if (!user) return usersPage(viewer, "", { error: viewer.t("admin.error.noUser") }, 404);
      const keyId = Number(params.key);
      if (!Number.isInteger(keyId) || !(await store.keys.revoke(keyId, clock(), user.id))) {
        return userPage(viewer, user, { error: viewer.t("operators.keys.notFound") }, 404);
      }
      services.logger.info("key revoked by an admin", { user_id: user.id, key_id: keyId, admin_id: viewer.user.id });
      return redirect(`/admin/users/${user.id}?done=revoked`);
    }, { admin: true, ...hide })
    .post("/admin/users/:id/credits", async ({ viewer, body, params }) => {
      const f = formFields(body);
      const user = await targetUser(params.id);
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
          await store.credits.deduct(user.id, amount, clock(), note, actor);
        } catch (e) {
          if (e instanceof InsufficientCreditsError) {
            return usersPage(viewer, user.email, { error: viewer.t("admin.error.insufficient", { amount, email: user.email, credits: user.credits }) }, 400);
          }
          throw e;
        }
        return afterCreditChange("deducted", user.id);
      }
      if (f.op !== "grant") return usersPage(viewer, "", { error: viewer.t("admin.error.op") }, 400);
      await store.credits.grant(user.id, amount, clock(), note, actor);
      return afterCreditChange("granted", user.id);
    }, { admin: true, ...hide })
    .post("/admin/users/:id/:action", async ({ viewer, params }) => {
      const user = await targetUser(params.id);
      if (!user) return usersPage(viewer, "", { error: viewer.t("admin.error.noUser") }, 404);
      if (user.id === viewer.user.id) return usersPage(viewer, "", { error: viewer.t("admin.error.self") }, 400);
      switch (params.action) {
        case "disable":
          await store.users.setDisabled(user.id, true);
          await workbench.sessions.endAllFor(user.id);
          return redirect("/admin?done=disabled");
        case "enable":
          await store.users.setDisabled(user.id, false);
          return redirect("/admin?done=enabled");
        case "admin":
          await store.users.setRole(user.id, "admin");
          return redirect("/admin?done=admin");
        // Undoes "Make admin" (never on yourself, above: the last admin cannot demote themselves).
        case "demote":
          await store.users.setRole(user.id, "user");
          return redirect("/admin?done=demoted");
        default:
          return usersPage(viewer, "", { error: viewer.t("admin.error.action") }, 404);
      }
    }, { admin: true, ...hide })
    .get("/admin/requests", async ({ viewer, query }) => {
      const q = parseAdminRequestsQuery(query);
      // A named user or key that does not exist matches nothing (and says so), rather than everything.
      const userId = q.user === undefined ? undefined : ((await store.users.byEmail(q.user))?.id ?? null);
      const keyId = q.key === undefined ? undefined : ((await store.keys.byPrefix(q.key.replace(/…$/, "")))?.id ?? null);
      const filter = adminFilter(q, { userId, keyId });
      const history = filter ? await store.requests.historyPage(filter, q.at, PAGE_SIZE) : { rows: [], newer: null, older: null, partial: false };
      const rows = history.rows;
      const emails = new Map<number, string>();
      for (const id of new Set(rows.map((r) => r.user_id))) emails.set(id, (await store.users.byId(id))?.email ?? `#${id}`);
      const keyIds = [...new Set(rows.flatMap((r) => (r.key_id === null ? [] : [r.key_id])))];
      const t = viewer.t;
      const problem = userId === null ? t("operators.requests.noUser", { email: q.user ?? "" }) : keyId === null ? t("operators.requests.noKey", { prefix: q.key ?? "" }) : null;
      return htmlResponse(
        adminRequestsPage(viewer, {
          query: q,
          history,
          total: filter ? await store.requests.historyTotal(filter) : 0,
          models: catalog.list().map((m) => m.id),
          emails,
          keys: await store.keys.prefixesOf(keyIds),
          problem,
        }),
      );
    }, { admin: true, ...hide })
    .get("/admin/upstreams", async ({ viewer, query }) =>
      htmlResponse(adminUpstreamsPage(viewer, await upstreamViews(services), query.enabled ? viewer.t("admin.upstreams.enabled") : null)), { admin: true, ...hide })
    .post("/admin/upstreams/:upstream/accounts/:account/enable", async ({ viewer, params }) => {
      const enabled = await enableUpstreamAccount({ upstreams: services.config.upstreams, flags: store.upstreams, pools: services.upstreams }, params.upstream, params.account);
      if (!enabled.ok) return htmlResponse(adminUpstreamsPage(viewer, await upstreamViews(services)), 404);
      return redirect("/admin/upstreams?enabled=1");
    }, { admin: true, ...hide })
    .get("/admin/models", ({ viewer }) => htmlResponse(adminModelsPage(viewer, catalog.list(), engineKindOf)), { admin: true, ...hide })
    .get("/admin/codes", async ({ viewer }) => htmlResponse(adminCodesPage(viewer, { batches: await workbench.codes.batches() }, clock())), { admin: true, ...hide })
    .post("/admin/codes", async ({ viewer, body }) => {
      const f = formFields(body);
      const form: BatchForm = { name: f.name, credits: f.credits, count: f.count, expires_days: f.expires_days };
      const whole = (raw: string | undefined) => (raw !== undefined && /^\s*\d{1,12}\s*$/.test(raw) ? Number(raw) : Number.NaN);
      const days = (f.expires_days ?? "").trim() === "" ? null : whole(f.expires_days);
      try {
        const created = await workbench.codes.createBatch({ name: f.name ?? "", credits: whole(f.credits), count: whole(f.count), expiresInDays: days, createdBy: `admin:${viewer.user.email}` });
        services.logger.info("redemption codes created", { batch_id: created.batch.id, codes: created.codes.length, credits: created.batch.credits, admin_id: viewer.user.id });
        // Rendered directly (not redirected): the codes exist only in this response.
        return htmlResponse(adminCodesPage(viewer, { batches: await workbench.codes.batches(), created }, clock()), 201);
      } catch (e) {
        if (!(e instanceof BatchRejected)) throw e;
        return htmlResponse(adminCodesPage(viewer, { batches: await workbench.codes.batches(), form, error: batchProblemText(viewer.t, e.problem) }, clock()), 400);
      }
    }, { admin: true, ...hide });
}
