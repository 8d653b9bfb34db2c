/** Sign in, sign up and first-admin setup forms. */
import { html, type Html } from "../html";
import { message, page } from "../layout";

export interface AuthFormState {
  email?: string;
  error?: string | null;
  notice?: string | null;
}

export function signInPage(s: AuthFormState & { registrationOpen: boolean; setupPending: boolean; next?: string }): Html {
  const action = s.next ? `/signin?next=${encodeURIComponent(s.next)}` : "/signin";
  return page({
    title: "Sign in",
    section: "auth",
    viewer: null,
    body: html`<section class="card narrow">
  <h1>Sign in</h1>
  ${message("error", s.error)}${message("notice", s.notice)}
  <form method="post" action="${action}" class="stack">
    <label for="email">Email</label>
    <input id="email" name="email" type="email" autocomplete="username" required value="${s.email ?? ""}" autofocus>
    <label for="password">Password</label>
    <input id="password" name="password" type="password" autocomplete="current-password" required>
    <button type="submit" class="primary">Sign in</button>
  </form>
  ${s.registrationOpen ? html`<p>No account yet? <a href="/signup">Create one</a>.</p>` : html`<p class="muted">Registration is closed; ask an administrator for an account.</p>`}
  ${s.setupPending ? html`<p class="muted">First start? <a href="/setup">Set up the admin account</a> with the token from the server log.</p>` : ""}
</section>`,
  });
}

export function signUpPage(s: AuthFormState & { minPasswordLength: number; initialCredits: number }): Html {
  return page({
    title: "Create account",
    section: "auth",
    viewer: null,
    body: html`<section class="card narrow">
  <h1>Create an account</h1>
  <p class="muted">New accounts start with ${s.initialCredits} credits. Each image costs 1 credit; chat is free.</p>
  ${message("error", s.error)}
  <form method="post" action="/signup" class="stack">
    <label for="email">Email</label>
    <input id="email" name="email" type="email" autocomplete="username" required value="${s.email ?? ""}" autofocus>
    <label for="password">Password <span class="muted">(at least ${s.minPasswordLength} characters)</span></label>
    <input id="password" name="password" type="password" autocomplete="new-password" required minlength="${s.minPasswordLength}">
    <button type="submit" class="primary">Create account</button>
  </form>
  <p>Already registered? <a href="/signin">Sign in</a>.</p>
</section>`,
  });
}

export function registrationClosedPage(): Html {
  return page({
    title: "Registration closed",
    section: "auth",
    viewer: null,
    body: html`<section class="card narrow"><h1>Registration is closed</h1><p>Ask an administrator for an account, then <a href="/signin">sign in</a>.</p></section>`,
  });
}

export function setupPage(s: AuthFormState & { pending: boolean; minPasswordLength: number }): Html {
  const body = s.pending
    ? html`<section class="card narrow">
  <h1>Set up the admin account</h1>
  <p class="muted">Enter the one-time setup token that the server printed in its log, and the admin's email and password.</p>
  ${message("error", s.error)}
  <form method="post" action="/setup" class="stack">
    <label for="token">Setup token</label>
    <input id="token" name="token" type="password" autocomplete="off" required autofocus>
    <label for="email">Admin email</label>
    <input id="email" name="email" type="email" autocomplete="username" required value="${s.email ?? ""}">
    <label for="password">Password <span class="muted">(at least ${s.minPasswordLength} characters)</span></label>
    <input id="password" name="password" type="password" autocomplete="new-password" required minlength="${s.minPasswordLength}">
    <button type="submit" class="primary">Create admin</button>
  </form>
</section>`
    : html`<section class="card narrow"><h1>Setup is complete</h1><p>An admin account exists. <a href="/signin">Sign in</a>.</p></section>`;
  return page({ title: "Setup", section: "auth", viewer: null, body });
}
