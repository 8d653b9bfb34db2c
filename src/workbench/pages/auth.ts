/** Sign in, sign up and first-admin setup forms. */
import { html, type Html } from "../html";
import type { Translator } from "../i18n";
import { message, page, type Viewer } from "../layout";

export interface AuthFormState {
  /** The request's language (these pages are signed out). */
  t: Translator;
  email?: string;
  error?: string | null;
  notice?: string | null;
}

export function signInPage(s: AuthFormState & { registrationOpen: boolean; setupPending: boolean; next?: string }): Html {
  const t = s.t;
  const action = s.next ? `/signin?next=${encodeURIComponent(s.next)}` : "/signin";
  return page({
    title: t("auth.signIn.title"),
    section: "auth",
    viewer: null,
    t,
    body: html`<section class="card narrow">
  <h1>${t("auth.signIn.title")}</h1>
  ${message("error", s.error)}${message("notice", s.notice)}
  <form method="post" action="${action}" class="stack">
    <label for="email">${t("auth.email")}</label>
    <input id="email" name="email" type="email" autocomplete="username" required value="${s.email ?? ""}" autofocus>
    <label for="password">${t("auth.password")}</label>
    <input id="password" name="password" type="password" autocomplete="current-password" required>
    <button type="submit" class="primary">${t("auth.signIn.submit")}</button>
  </form>
  ${s.registrationOpen ? html`<p>${t.html("auth.signIn.noAccount")}</p>` : html`<p class="muted">${t("auth.signIn.closed")}</p>`}
  ${s.setupPending ? html`<p class="muted">${t.html("auth.signIn.firstStart")}</p>` : ""}
</section>`,
  });
}

/** What images cost, from the configured prices: one price, a range, free, or no images at all. */
export function priceSentence(t: Translator, prices: { min: number; max: number } | null): string {
  if (prices === null) return t("auth.signUp.price.chatOnly");
  if (prices.max === 0) return t("auth.signUp.price.free");
  if (prices.min === prices.max) return t.plural("auth.signUp.price", prices.min);
  return t("auth.signUp.price.range", { min: prices.min, max: prices.max });
}

export function signUpPage(s: AuthFormState & { minPasswordLength: number; initialCredits: number; imagePrices: { min: number; max: number } | null }): Html {
  const t = s.t;
  return page({
    title: t("auth.signUp.title"),
    section: "auth",
    viewer: null,
    t,
    body: html`<section class="card narrow">
  <h1>${t("auth.signUp.heading")}</h1>
  <p class="muted" data-testid="signup-intro">${t.plural("auth.signUp.intro", s.initialCredits)} ${priceSentence(t, s.imagePrices)}</p>
  ${message("error", s.error)}
  <form method="post" action="/signup" class="stack">
    <label for="email">${t("auth.email")}</label>
    <input id="email" name="email" type="email" autocomplete="username" required value="${s.email ?? ""}" autofocus>
    <label for="password">${t("auth.password")} <span class="muted">${t("auth.passwordRule", { count: s.minPasswordLength })}</span></label>
    <input id="password" name="password" type="password" autocomplete="new-password" required minlength="${s.minPasswordLength}">
    <button type="submit" class="primary">${t("auth.signUp.submit")}</button>
  </form>
  <p>${t.html("auth.signUp.haveAccount")}</p>
</section>`,
  });
}

export function registrationClosedPage(t: Translator): Html {
  return page({
    title: t("auth.closed.title"),
    section: "auth",
    viewer: null,
    t,
    body: html`<section class="card narrow"><h1>${t("auth.closed.heading")}</h1><p>${t.html("auth.closed.text")}</p></section>`,
  });
}

/** viewer: who is signed in already, if anyone (the page then says so instead of offering "Sign in"). */
export function setupPage(s: AuthFormState & { pending: boolean; minPasswordLength: number; viewer?: Viewer | null }): Html {
  const t = s.viewer ? s.viewer.t : s.t;
  const body = s.pending
    ? html`<section class="card narrow">
  <h1>${t("auth.setup.heading")}</h1>
  <p class="muted">${t("auth.setup.intro")}</p>
  ${message("error", s.error)}
  <form method="post" action="/setup" class="stack">
    <label for="token">${t("auth.setup.token")}</label>
    <input id="token" name="token" type="password" autocomplete="off" required autofocus>
    <label for="email">${t("auth.setup.email")}</label>
    <input id="email" name="email" type="email" autocomplete="username" required value="${s.email ?? ""}">
    <label for="password">${t("auth.password")} <span class="muted">${t("auth.passwordRule", { count: s.minPasswordLength })}</span></label>
    <input id="password" name="password" type="password" autocomplete="new-password" required minlength="${s.minPasswordLength}">
    <button type="submit" class="primary">${t("auth.setup.submit")}</button>
  </form>
</section>`
    : s.viewer
      ? html`<section class="card narrow"><h1>${t("auth.setup.doneHeading")}</h1><p>${t.html("auth.setup.doneSignedIn", { email: html`<strong>${s.viewer.user.email}</strong>` })}</p><p><a href="${s.viewer.user.role === "admin" ? "/admin" : "/playground"}">${s.viewer.user.role === "admin" ? t("auth.setup.goAdmin") : t("auth.setup.goPlayground")}</a></p></section>`
      : html`<section class="card narrow"><h1>${t("auth.setup.doneHeading")}</h1><p>${t.html("auth.setup.doneText")}</p></section>`;
  return page({ title: t("auth.setup.title"), section: "auth", ...(s.viewer ? { viewer: s.viewer } : { viewer: null, t }), body });
}
