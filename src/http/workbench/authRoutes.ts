/** /, sign in, sign up, sign out and the one-time first-admin setup. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import type { SetupResult } from "../../core/signIn";
import { accountProblemText } from "./accountProblems";
import { imagePriceRange } from "../../core/models";
import { registrationClosedPage, setupPage, signInPage, signUpPage } from "../../workbench/pages/auth";
import { checkViewer, viewerOf, workbenchGuards } from "./guards";
import { clientAddress, formFields, htmlResponse, redirect, safeNext } from "./respond";
import { translatorFor } from "./locale";
import type { Translator } from "../../workbench/i18n";
import { MAX_EMAIL_CHARS } from "../../core/limits";

const hide = { detail: { hide: true } };

const SETUP_STATUS: Record<Exclude<SetupResult, { ok: true }>["reason"], number> = { closed: 410, throttled: 429, wrong_token: 401, invalid: 400 };

export function authRoutes(services: Services) {
  const { config, workbench } = services;
  const wb = config.workbench;
  const setupOpen = async () => {
    await workbench.ready;
    return workbench.signIn.setupOpen();
  };
  const signIn = async (s: { t: Translator; email?: string; error?: string | null; notice?: string | null; next?: string }, status = 200) =>
    htmlResponse(signInPage({ ...s, registrationOpen: wb.registration === "open", setupPending: await setupOpen() }), status);

  return new Elysia({ name: "workbench.auth" })
    .use(workbenchGuards(services))
    .get("/", async ({ request }) => redirect((await viewerOf(services, request)) ? "/playground" : "/signin"), hide)
    .get("/signin", async ({ request, query }) => {
      if (await viewerOf(services, request)) return redirect(safeNext(query.next));
      const next = query.next ? safeNext(query.next) : undefined;
      const t = translatorFor(request);
      return signIn({ t, notice: query.signed_out === "1" ? t("auth.signIn.signedOut") : null, next });
    }, hide)
    .post("/signin", async ({ request, body, query }) => {
      const t = translatorFor(request);
      const f = formFields(body);
      const email = (f.email ?? "").slice(0, MAX_EMAIL_CHARS);
      const result = await workbench.signIn.withPassword(email, f.password ?? "", clientAddress(request));
      if (!result.ok) {
        if (result.reason === "throttled") {
          const minutes = Math.ceil(result.retryAfterMs / 60_000);
          return signIn({ t, email, next: query.next ? safeNext(query.next) : undefined, error: t.plural("auth.signIn.throttled", minutes) }, 429);
        }
        const error = result.reason === "disabled" ? t("auth.signIn.disabled") : t("auth.signIn.wrong");
        return signIn({ t, email, next: query.next ? safeNext(query.next) : undefined, error }, 401);
      }
      const { cookie } = await workbench.sessions.start(result.user.id, request);
      return redirect(safeNext(query.next), { "set-cookie": cookie });
    }, { sameOrigin: true, ...hide })
    .get("/signup", async ({ request }) => {
      if (wb.registration !== "open") return htmlResponse(registrationClosedPage(translatorFor(request)), 403);
      if (await viewerOf(services, request)) return redirect("/playground");
      return htmlResponse(signUpPage({ t: translatorFor(request), minPasswordLength: wb.min_password_length, initialCredits: wb.initial_credits, imagePrices: imagePriceRange(services.catalog.list()) }));
    }, hide)
    .post("/signup", async ({ request, body }) => {
      const t = translatorFor(request);
      if (wb.registration !== "open") return htmlResponse(registrationClosedPage(t), 403);
      const f = formFields(body);
      const email = (f.email ?? "").slice(0, MAX_EMAIL_CHARS);
      const form = (error: string, status: number) =>
        htmlResponse(signUpPage({ t, email, error, minPasswordLength: wb.min_password_length, initialCredits: wb.initial_credits, imagePrices: imagePriceRange(services.catalog.list()) }), status);
      const result = await workbench.signIn.signUp(email, f.password ?? "", clientAddress(request));
      if (!result.ok && result.reason === "throttled") {
        return form(t.plural("auth.signUp.throttled", Math.ceil(result.retryAfterMs / 60_000)), 429);
      }
      if (!result.ok) return form(accountProblemText(t, result.problem, wb.min_password_length), 400);
      const { cookie } = await workbench.sessions.start(result.user.id, request);
      return redirect("/playground", { "set-cookie": cookie });
    }, { sameOrigin: true, ...hide })
    .post("/signout", async ({ request, body }) => {
      // A stale tab whose session already ended: the wish is met, so no "session has ended" error page.
      if (!(await viewerOf(services, request))) return redirect("/signin?signed_out=1", { "set-cookie": await workbench.sessions.end(request) });
      const guarded = await checkViewer(services, request, body);
      if (guarded.response) return guarded.response;
      return redirect("/signin?signed_out=1", { "set-cookie": await workbench.sessions.end(request) });
    }, hide)
    .get("/setup", async ({ request }) => {
      const pending = await setupOpen();
      return htmlResponse(setupPage({ t: translatorFor(request), pending, minPasswordLength: wb.min_password_length, viewer: await viewerOf(services, request) }), pending ? 200 : 410);
    }, hide)
    .post("/setup", async ({ request, body }) => {
      const f = formFields(body);
      const email = (f.email ?? "").slice(0, MAX_EMAIL_CHARS);
      const t = translatorFor(request);
      const form = async (error: string, status: number) =>
        htmlResponse(setupPage({ t, pending: await setupOpen(), email, error, minPasswordLength: wb.min_password_length }), status);
      await workbench.ready;
      const result = await workbench.signIn.setUpFirstAdmin(f.token ?? "", email, f.password ?? "", clientAddress(request));
      if (!result.ok) return form(accountProblemText(t, result.problem, wb.min_password_length), SETUP_STATUS[result.reason]);
      services.logger.info("first admin created through /setup", { user_id: result.user.id });
      const { cookie } = await workbench.sessions.start(result.user.id, request);
      return redirect("/admin", { "set-cookie": cookie });
    }, { sameOrigin: true, ...hide });
}
