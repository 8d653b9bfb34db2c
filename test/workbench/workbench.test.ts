/**
 * Workbench rules below the browser: the escaping helper, the same-origin rule, session expiry
 * and sign-out, cookie flags, closed registration, setup-token rules, and the session on /v1
 * (same origin, CSRF header). Uses app.handle() with a controllable clock; no sockets.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../../src/app";
import { createServices } from "../../src/services";
import { loadConfig, type Config } from "../../src/config";
import { addUser } from "../../src/core/accounts";
import { MAX_CREDIT_GRANT } from "../../src/core/limits";
import { createLogger } from "../../src/logger";
import { createStore, type Store } from "../../src/store";
import { latestVersion, openDatabase, type Db } from "../../src/store/database";
import { escapeHtml, html, raw } from "../../src/workbench/html";
import { SetupToken } from "../../src/core/setupToken";
import { SignIn } from "../../src/core/signIn";
import { isSameOrigin } from "../../src/http/workbench/origin";

const BASE = "http://wb.test";
let store: Store | undefined;
let db: Db;
afterEach(() => store?.close());

function makeApp(edit: (c: Config) => void = () => {}) {
  const config = loadConfig({ env: {} });
  edit(config);
  db = openDatabase(":memory:");
  store = createStore(db, latestVersion());
  let now = 1_800_000_000_000;
  const logs: string[] = [];
  const services = createServices({ config, store, logger: createLogger((l) => logs.push(l)), clock: () => now });
  const app = createApp(services);
  const handle = (path: string, init: RequestInit = {}) => app.handle(new Request(`${BASE}${path}`, init));
  const form = (path: string, fields: Record<string, string>, headers: Record<string, string> = {}) =>
    handle(path, {
      method: "POST",
      headers: { origin: BASE, "content-type": "application/x-www-form-urlencoded", ...headers },
      body: new URLSearchParams(fields),
    });
  return { app, services, store, logs, handle, form, advance: (ms: number) => (now += ms) };
}

const cookieOf = (res: Response) => res.headers.get("set-cookie")!.split(";")[0]!;
const csrfOf = async (res: Response) => /name="csrf-token" content="([^"]+)"/.exec(await res.text())![1]!;

describe("html escaping", () => {
  test("interpolations are escaped unless they are Html", () => {
    expect(escapeHtml(`<script>"x" & 'y'</script>`)).toBe("&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;");
    const name = "<img src=x onerror=alert(1)>";
    expect(html`<td>${name}</td>`.value).toBe("<td>&lt;img src=x onerror=alert(1)&gt;</td>");
    expect(html`<td>${html`<b>${name}</b>`}</td>`.value).toBe("<td><b>&lt;img src=x onerror=alert(1)&gt;</b></td>");
    expect(html`${[1, "<", raw("<br>")]}${null}${undefined}${false}`.value).toBe("1&lt;<br>");
  }, 30_000);
});

describe("same-origin rule", () => {
  const config = loadConfig({ env: {} });
  const req = (headers: Record<string, string>) => new Request(`${BASE}/keys`, { method: "POST", headers: { host: "wb.test", ...headers } });
  test("accepts our origin and header-less clients, refuses others", () => {
    expect(isSameOrigin(req({ origin: BASE }), config)).toBe(true);
    expect(isSameOrigin(req({ "sec-fetch-site": "same-origin" }), config)).toBe(true);
    expect(isSameOrigin(req({}), config)).toBe(true);
    expect(isSameOrigin(req({ origin: "http://evil.test" }), config)).toBe(false);
    expect(isSameOrigin(req({ origin: "null" }), config)).toBe(false);
    expect(isSameOrigin(req({ "sec-fetch-site": "cross-site" }), config)).toBe(false);
    expect(isSameOrigin(req({ "sec-fetch-site": "same-site", origin: "http://sub.wb.test" }), config)).toBe(false);
  }, 30_000);
});

describe("sessions", () => {
  test("sign-up starts a session; it expires after session_ttl_hours and sign-out ends it", async () => {
    const { handle, form, advance, store } = makeApp((c) => {
      c.workbench.session_ttl_hours = 1;
      c.workbench.initial_credits = 7;
    });
    const res = await form("/signup", { email: "new@example.com", password: "long enough pw" });
    expect(res.status).toBe(303);
    const setCookie = res.headers.get("set-cookie")!;
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("SameSite=Lax");
    expect(setCookie).not.toContain("Secure");
    const cookie = cookieOf(res);
    const user = (await store.users.byEmail("new@example.com"))!;
    expect(user.credits).toBe(7);
    expect(await store.credits.ledgerSum(user.id)).toBe(7);
    // Only a hash of the cookie value is stored.
    const stored = db.query<{ id_hash: string }, []>("SELECT id_hash FROM sessions").all();
    expect(stored.length).toBe(1);
    expect(stored[0]!.id_hash).not.toContain(cookie.split("=")[1]!);

    expect((await handle("/session", { headers: { cookie } })).status).toBe(200);
    advance(3_600_000 + 1);
    expect((await handle("/session", { headers: { cookie } })).status).toBe(401);
    const page = await handle("/keys", { headers: { cookie } });
    expect(page.status).toBe(303);
    expect(page.headers.get("location")).toBe("/signin?next=%2Fkeys");

    expect(await (await handle("/signin?next=%2Fkeys")).text()).toContain('action="/signin?next=%2Fkeys"');
    const again = await form("/signin?next=%2Fkeys", { email: "new@example.com", password: "long enough pw" });
    expect(again.headers.get("location")).toBe("/keys");
    const cookie2 = cookieOf(again);
    // Only local destinations: no open redirect.
    const offsite = await form("/signin?next=%2F%2Fevil.test", { email: "new@example.com", password: "long enough pw" });
    expect(offsite.headers.get("location")).toBe("/playground");
    // Characters a Location header cannot carry are percent-encoded, not a 500 (and never a second header).
    const crlf = await form("/signin?next=%2Fkeys%0D%0ASet-Cookie%3A%20x%3D1", { email: "new@example.com", password: "long enough pw" });
    expect(crlf.status).toBe(303);
    expect(crlf.headers.get("location")).toBe("/keys%0D%0ASet-Cookie:%20x=1");
    const euro = await handle("/signin?next=%2F%E2%82%AC", { headers: { cookie: cookieOf(crlf) } });
    expect(euro.status).toBe(303);
    expect(euro.headers.get("location")).toBe("/%E2%82%AC");
    const csrf = await csrfOf(await handle("/keys", { headers: { cookie: cookie2 } }));
    const out = await form("/signout", { _csrf: csrf }, { cookie: cookie2 });
    expect(out.status).toBe(303);
    expect(out.headers.get("set-cookie")).toContain("Max-Age=0");
    expect((await handle("/session", { headers: { cookie: cookie2 } })).status).toBe(401);
    // Sign out again from a stale tab: simply signed out, not a "session has ended" 403 page.
    const stale = await form("/signout", { _csrf: csrf }, { cookie: cookie2 });
    expect(stale.status).toBe(303);
    expect(stale.headers.get("location")).toBe("/signin?signed_out=1");
    expect(stale.headers.get("set-cookie")).toContain("Max-Age=0");
  }, 30_000);

  test("secure_cookies = always marks the cookie Secure", async () => {
    const { form } = makeApp((c) => (c.workbench.secure_cookies = "always"));
    const res = await form("/signup", { email: "s@example.com", password: "long enough pw" });
    expect(res.headers.get("set-cookie")).toContain("; Secure");
  }, 30_000);

  test("a disabled user's session stops working", async () => {
    const { handle, form, store } = makeApp();
    const res = await form("/signup", { email: "d@example.com", password: "long enough pw" });
    const cookie = cookieOf(res);
    await store.users.setDisabled((await store.users.byEmail("d@example.com"))!.id, true);
    expect((await handle("/session", { headers: { cookie } })).status).toBe(401);
    const signin = await form("/signin", { email: "d@example.com", password: "long enough pw" });
    expect(signin.status).toBe(401);
    // With the right password the user learns why; with a wrong one, nothing.
    expect(await signin.text()).toContain("This account is disabled. Ask an administrator to enable it.");
    const wrong = await form("/signin", { email: "d@example.com", password: "not the password" });
    expect(wrong.status).toBe(401);
    const wrongText = await wrong.text();
    expect(wrongText).toContain("Incorrect email or password.");
    expect(wrongText).not.toContain("disabled");
  }, 30_000);
});

describe("page head", () => {
  test("declares an (empty) icon, so browsers do not ask for /favicon.ico and log a 404 per visit", async () => {
    const { handle } = makeApp();
    const text = await (await handle("/signin")).text();
    expect(text).toContain('<link rel="icon" href="data:,">');
    // The page's CSP must allow it (img-src covers icons).
    expect((await handle("/signin")).headers.get("content-security-policy")).toContain("img-src 'self' data:");
  }, 30_000);
});

describe("assets", () => {
  test("an embedded asset is served with its type and ETag; a name every object has is 404", async () => {
    const { handle } = makeApp();
    const css = await handle("/assets/workbench.css");
    expect(css.status).toBe(200);
    expect(css.headers.get("content-type")).toBe("text/css; charset=utf-8");
    expect((await handle("/assets/workbench.css", { headers: { "if-none-match": css.headers.get("etag")! } })).status).toBe(304);
    for (const name of ["constructor", "__proto__", "toString", "hasOwnProperty", "nope.js"]) {
      const res = await handle(`/assets/${name}`);
      expect([name, res.status]).toEqual([name, 404]);
    }
  });
});

describe("malformed cookies", () => {
  test("a session cookie with a broken %-escape is no session, not a 500", async () => {
    const { handle } = makeApp();
    const cookie = "atelier_session=%zz";
    const page = await handle("/keys", { headers: { cookie } });
    expect(page.status).toBe(303);
    expect(page.headers.get("location")).toBe("/signin?next=%2Fkeys");
    expect((await handle("/signin", { headers: { cookie } })).status).toBe(200);
    expect((await handle("/session", { headers: { cookie } })).status).toBe(401);
    const api = await handle("/v1/models", { headers: { cookie } });
    expect(api.status).toBe(401);
    expect((await api.json()).error.code).toBe("missing_api_key");
  }, 30_000);
});

describe("sign-in throttling", () => {
  test("per address and per account, within a window; a success resets the account's count and spends nothing of the address's", async () => {
    const config = loadConfig({ env: {} });
    db = openDatabase(":memory:");
  store = createStore(db, latestVersion());
    await addUser(store, Date.now, { email: "known@example.com", password: "the right one" });
    let now = 1_000_000;
    const rules = { minPasswordLength: config.workbench.min_password_length, initialCredits: 0 };
    const signIn = new SignIn(store, rules, new SetupToken(), () => now, { windowMs: 60_000, perAccount: 2, perAddress: 3, signUpsPerAddress: 1 });

    // Per address: different emails from one address.
    for (const email of ["a@example.com", "b@example.com", "c@example.com"]) {
      expect(await signIn.withPassword(email, "wrong", "10.0.0.1")).toEqual({ ok: false, reason: "invalid" });
    }
    const blocked = await signIn.withPassword("known@example.com", "the right one", "10.0.0.1");
    expect(blocked.ok).toBe(false);
    expect(blocked.ok === false && blocked.reason).toBe("throttled");
    // Another address is not affected; the window passes.
    expect((await signIn.withPassword("known@example.com", "the right one", "10.0.0.2")).ok).toBe(true);
    now += 60_001;
    expect((await signIn.withPassword("known@example.com", "the right one", "10.0.0.1")).ok).toBe(true);

    // Successes do not spend the address's budget: the users behind one proxy all sign in.
    now += 60_001;
    for (let i = 0; i < 10; i++) expect([i, (await signIn.withPassword("known@example.com", "the right one", "10.9.9.9")).ok]).toEqual([i, true]);
    expect(await signIn.withPassword("a@example.com", "wrong", "10.9.9.9")).toEqual({ ok: false, reason: "invalid" });

    // Per account: from many addresses, an unknown and a known email are limited alike.
    for (const email of ["known@example.com", "ghost@example.com"]) {
      expect((await signIn.withPassword(email, "wrong", "10.1.0.1")).ok).toBe(false);
      expect((await signIn.withPassword(email, "wrong", "10.1.0.2")).ok).toBe(false);
      const third = await signIn.withPassword(email, email.startsWith("known") ? "the right one" : "wrong", "10.1.0.3");
      expect(third.ok === false && third.reason).toBe("throttled");
    }
  }, 30_000);
});

describe("registration and setup", () => {
  test("closed registration refuses sign-up", async () => {
    const { handle, form, store } = makeApp((c) => (c.workbench.registration = "closed"));
    expect((await handle("/signup")).status).toBe(403);
    expect((await form("/signup", { email: "x@example.com", password: "long enough pw" })).status).toBe(403);
    expect(await store.users.byEmail("x@example.com")).toBeNull();
    expect(await (await handle("/signin")).text()).toContain("Registration is closed");
  }, 30_000);

  test("an existing email gets a generic sign-up answer", async () => {
    const { form, store } = makeApp();
    await addUser(store, Date.now, { email: "taken@example.com", password: "whatever pw 1" });
    const res = await form("/signup", { email: "taken@example.com", password: "long enough pw" });
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(text).toContain("could not create an account");
    expect(text).not.toContain("already exists");
  }, 30_000);

  test("no setup token is printed when an admin exists; a wrong token is refused", async () => {
    const first = makeApp();
    // The start's setup check (the server awaits it before listening).
    await first.services.workbench.ready;
    expect(first.logs.some((l) => l.includes("setup_token"))).toBe(true);
    // The password rule of sign-up, both ends, before the token is looked at.
    for (const password of ["short", "x".repeat(1025)]) {
      const weak = await first.form("/setup", { token: "nope", email: "a@example.com", password });
      expect(weak.status).toBe(400);
      expect(await weak.text()).toContain("Password must be at");
    }
    const wrong = await first.form("/setup", { token: "nope", email: "a@example.com", password: "long enough pw" });
    expect(wrong.status).toBe(401);
    expect(await first.store.users.countAdmins()).toBe(0);
    // A cross-origin setup post is refused before the token is even looked at.
    const token = JSON.parse(first.logs.find((l) => l.includes("setup_token"))!).setup_token as string;
    const cross = await first.form("/setup", { token, email: "a@example.com", password: "long enough pw" }, { origin: "http://evil.test" });
    expect(cross.status).toBe(403);
    const ok = await first.form("/setup", { token, email: "a@example.com", password: "long enough pw" });
    expect(ok.status).toBe(303);
    expect((await first.store.users.byEmail("a@example.com"))!.role).toBe("admin");
    const reuse = await first.form("/setup", { token, email: "b@example.com", password: "long enough pw" });
    expect(reuse.status).toBe(410);
    await first.store.close();

    const config = loadConfig({ env: {} });
    db = openDatabase(":memory:");
  store = createStore(db, latestVersion());
    await addUser(store, Date.now, { email: "root@example.com", role: "admin" });
    const logs: string[] = [];
    await createServices({ config, store, logger: createLogger((l) => logs.push(l)) }).workbench.ready;
    expect(logs.some((l) => l.includes("setup_token"))).toBe(false);
  }, 30_000);
});

describe("the session on /v1", () => {
  test("GET works same-origin; POST needs x-csrf-token; other origins are refused", async () => {
    const { handle, form } = makeApp();
    const cookie = cookieOf(await form("/signup", { email: "v1@example.com", password: "long enough pw" }));
    const csrf = await csrfOf(await handle("/playground", { headers: { cookie } }));
    expect((await handle("/v1/models", { headers: { cookie, "sec-fetch-site": "same-origin" } })).status).toBe(200);
    const cross = await handle("/v1/models", { headers: { cookie, origin: "http://evil.test", "sec-fetch-site": "cross-site" } });
    expect(cross.status).toBe(403);
    expect((await cross.json()).error.code).toBe("cross_origin_session");
    const chat = (headers: Record<string, string>) =>
      handle("/v1/chat/completions", {
        method: "POST",
        headers: { cookie, origin: BASE, "content-type": "application/json", ...headers },
        body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] }),
      });
    const noToken = await chat({});
    expect(noToken.status).toBe(403);
    expect((await noToken.json()).error.code).toBe("csrf_token_invalid");
    expect((await chat({ "x-csrf-token": "wrong" })).status).toBe(403);
    const ok = await chat({ "x-csrf-token": csrf });
    expect(ok.status).toBe(200);
    expect((await ok.json()).choices[0].message.content).toContain("hi");
    // Without a cookie nothing changes: a key is required.
    expect((await handle("/v1/models")).status).toBe(401);
  }, 30_000);
});

describe("admin forms", () => {
  test("grant, deduct, disable (ends sessions), enable, make admin; users cannot; admins cannot lock themselves out", async () => {
    const { handle, form, store } = makeApp((c) => (c.workbench.initial_credits = 2));
    await addUser(store, Date.now, { email: "boss@example.com", password: "boss password", role: "admin" });
    const boss = cookieOf(await form("/signin", { email: "boss@example.com", password: "boss password" }));
    const bossCsrf = await csrfOf(await handle("/admin", { headers: { cookie: boss } }));
    const worker = cookieOf(await form("/signup", { email: "worker@example.com", password: "worker password" }));
    const workerCsrf = await csrfOf(await handle("/keys", { headers: { cookie: worker } }));
    const w = (await store.users.byEmail("worker@example.com"))!;
    const b = (await store.users.byEmail("boss@example.com"))!;
    const act = (cookie: string, path: string, fields: Record<string, string>) => form(path, fields, { cookie });

    // A plain user can neither see nor use the admin forms.
    expect((await handle("/admin", { headers: { cookie: worker } })).status).toBe(403);
    expect((await act(worker, `/admin/users/${w.id}/credits`, { _csrf: workerCsrf, amount: "50", op: "grant" })).status).toBe(403);
    expect(await store.credits.balance(w.id)).toBe(2);

    const granted = await act(boss, `/admin/users/${w.id}/credits`, { _csrf: bossCsrf, amount: "5", op: "grant", note: "bonus" });
    // The redirect names the ledger row it wrote, so the notice can say whom and how much.
    const grantRow = (await store.credits.ledger(w.id, 1))[0]!;
    expect(granted.headers.get("location")).toBe(`/admin?done=granted&user=${w.id}&entry=${grantRow.id}`);
    const notice = await (await handle(granted.headers.get("location")!, { headers: { cookie: boss } })).text();
    expect(notice).toContain(`Granted 5 credits to ${w.email}; ${w.email} now has 7 credits.`);
    expect((await act(boss, `/admin/users/${w.id}/credits`, { _csrf: bossCsrf, amount: "3", op: "deduct" })).status).toBe(303);
    expect((await act(boss, `/admin/users/${w.id}/credits`, { _csrf: bossCsrf, amount: "1.5", op: "grant" })).status).toBe(400);
    expect((await act(boss, `/admin/users/${w.id}/credits`, { _csrf: bossCsrf, amount: "99", op: "deduct" })).status).toBe(400);
    expect(await store.credits.balance(w.id)).toBe(4);
    expect(await store.credits.ledgerSum(w.id)).toBe(4);
    const ledger = await store.credits.ledger(w.id);
    expect(ledger[1]).toMatchObject({ kind: "grant", amount: 5, note: "bonus", actor: "admin:boss@example.com" });
    expect(ledger[0]).toMatchObject({ kind: "deduct", amount: -3 });
    // The page's cap is the CLI's: MAX_CREDIT_GRANT, and not one more.
    const boss2 = (amount: number, op: string) => act(boss, `/admin/users/${b.id}/credits`, { _csrf: bossCsrf, amount: String(amount), op });
    expect((await boss2(MAX_CREDIT_GRANT + 1, "grant")).status).toBe(400);
    expect((await boss2(MAX_CREDIT_GRANT, "grant")).status).toBe(303);
    expect((await boss2(MAX_CREDIT_GRANT, "deduct")).status).toBe(303);
    expect(await store.credits.balance(b.id)).toBe(0);

    expect((await act(boss, `/admin/users/${w.id}/disable`, { _csrf: bossCsrf })).status).toBe(303);
    expect((await store.users.byId(w.id))!.disabled).toBe(1);
    expect((await handle("/session", { headers: { cookie: worker } })).status).toBe(401);
    expect((await act(boss, `/admin/users/${w.id}/enable`, { _csrf: bossCsrf })).status).toBe(303);
    expect((await store.users.byId(w.id))!.disabled).toBe(0);
    expect((await act(boss, `/admin/users/${w.id}/admin`, { _csrf: bossCsrf })).status).toBe(303);
    expect((await store.users.byId(w.id))!.role).toBe("admin");
    // A mistaken "Make admin" can be undone; the page offers it for the other admin.
    expect(await (await handle("/admin", { headers: { cookie: boss } })).text()).toContain(`action="/admin/users/${w.id}/demote"`);
    const demoted = await act(boss, `/admin/users/${w.id}/demote`, { _csrf: bossCsrf });
    expect(demoted.headers.get("location")).toBe("/admin?done=demoted");
    expect((await store.users.byId(w.id))!.role).toBe("user");
    expect((await act(boss, `/admin/users/${b.id}/demote`, { _csrf: bossCsrf })).status).toBe(400);
    expect((await store.users.byId(b.id))!.role).toBe("admin");

    expect((await act(boss, `/admin/users/${b.id}/disable`, { _csrf: bossCsrf })).status).toBe(400);
    expect((await store.users.byId(b.id))!.disabled).toBe(0);
    expect((await act(boss, `/admin/users/${w.id}/disable`, { _csrf: "wrong" })).status).toBe(403);
    expect((await store.users.byId(w.id))!.disabled).toBe(0);
  }, 30_000);
});

describe("guards", () => {
  test("every workbench POST refuses a request without the session's CSRF token, and one from another origin", async () => {
    const { app, handle, form, store } = makeApp();
    await addUser(store, Date.now, { email: "boss@example.com", password: "boss password", role: "admin" });
    const cookie = cookieOf(await form("/signin", { email: "boss@example.com", password: "boss password" }));
    const csrf = await csrfOf(await handle("/admin", { headers: { cookie } }));
    const posts = app.routes.filter((r) => r.method === "POST" && !r.path.startsWith("/v1/") && !r.path.startsWith("/admin/api/")).map((r) => r.path.replace(/:[^/]+/g, "1"));
    expect(posts.length).toBeGreaterThanOrEqual(9);
    // Posted before there is a session (or, the language switch, with or without one): only the origin can be checked.
    const anonymous = ["/signin", "/signup", "/setup", "/language"];
    for (const path of posts) {
      const cross = await form(path, { _csrf: csrf, email: "x@example.com", password: "long enough pw" }, { cookie, origin: "http://evil.test" });
      expect([path, cross.status]).toEqual([path, 403]);
      if (anonymous.includes(path)) continue;
      const noToken = await form(path, { email: "x@example.com", password: "long enough pw" }, { cookie });
      expect([path, noToken.status]).toEqual([path, 403]);
      expect(await noToken.text()).toContain("Request rejected");
    }
    expect((await handle("/session", { headers: { cookie } })).status).toBe(200);
  }, 30_000);
});

describe("upstream pool page", () => {
  test("an admin re-enables a disabled account: the flag is cleared and the running pool sees it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "atelier-wb-"));
    const file = join(dir, "atelier.toml");
    writeFileSync(file, `[[upstreams]]\nid = "acme"\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\naccounts = [{ id = "acme-main", api_key = "sk-upstream-secret" }]\n`);
    const { handle, form, store, services } = makeApp((c) => (c.upstreams = loadConfig({ env: {}, file }).upstreams));
    rmSync(dir, { recursive: true });
    await addUser(store, Date.now, { email: "boss@example.com", password: "boss password", role: "admin" });
    const cookie = cookieOf(await form("/signin", { email: "boss@example.com", password: "boss password" }));
    const csrf = await csrfOf(await handle("/admin/upstreams", { headers: { cookie } }));
    await store.upstreams.disableAccount("acme", "acme-main", "key rejected", 1);
    await services.upstreams.get("acme")!.refresh();
    expect(services.upstreams.get("acme")!.snapshot()[0]!.state).toBe("disabled");

    const ok = await form("/admin/upstreams/acme/accounts/acme-main/enable", { _csrf: csrf }, { cookie });
    expect(ok.status).toBe(303);
    expect(ok.headers.get("location")).toBe("/admin/upstreams?enabled=1");
    expect((await store.upstreams.disabledAccounts("acme")).size).toBe(0);
    expect(services.upstreams.get("acme")!.snapshot()[0]!.state).toBe("healthy");
    expect(await (await handle("/admin/upstreams?enabled=1", { headers: { cookie } })).text()).toContain("The account is enabled again.");
    expect((await form("/admin/upstreams/acme/accounts/nobody/enable", { _csrf: csrf }, { cookie })).status).toBe(404);
    expect((await form("/admin/upstreams/nowhere/accounts/acme-main/enable", { _csrf: csrf }, { cookie })).status).toBe(404);
  }, 30_000);
});

describe("admin users page with many users", () => {
  test("says when only the first 200 are shown; search finds the rest; a form error shows the row it is about", async () => {
    const { handle, form, store } = makeApp();
    await addUser(store, Date.now, { email: "boss@example.com", password: "boss password", role: "admin" });
    for (let i = 1; i <= 205; i++) await store.users.create({ email: `user${String(i).padStart(3, "0")}@example.com`, passwordHash: null, role: "user", credits: 0 }, 1_800_000_000_000);
    const boss = cookieOf(await form("/signin", { email: "boss@example.com", password: "boss password" }));
    const rowsOf = (text: string) => (text.match(/<tr data-user-email=/g) ?? []).length;

    const all = await (await handle("/admin", { headers: { cookie: boss } })).text();
    expect(rowsOf(all)).toBe(200);
    expect(all).toContain("Showing the first 200 users; search by email to find the others.");
    expect(all).not.toContain("user205@example.com");
    // Every row's buttons say whom they act on (a screen reader lists "Grant", "Grant", … otherwise).
    for (const label of ["Grant credits to user001@example.com", "Deduct credits from user001@example.com", "Disable user001@example.com", "Make user001@example.com an admin"]) {
      expect(all).toContain(`aria-label="${label}"`);
    }
    const found = await (await handle("/admin?q=user205", { headers: { cookie: boss } })).text();
    expect(rowsOf(found)).toBe(1);
    expect(found).not.toContain("Showing the first");

    const last = (await store.users.byEmail("user205@example.com"))!;
    const csrf = await csrfOf(await handle("/admin", { headers: { cookie: boss } }));
    const bad = await form(`/admin/users/${last.id}/credits`, { _csrf: csrf, amount: "-5", op: "grant" }, { cookie: boss });
    expect(bad.status).toBe(400);
    const text = await bad.text();
    expect(text).toContain("Enter a whole number of credits from 1 to 1000000000 for user205@example.com.");
    expect(rowsOf(text)).toBe(1);
    expect(text).toContain('data-user-email="user205@example.com"');
    expect(await store.credits.balance(last.id)).toBe(0);
  }, 30_000);
});

describe("history", () => {
  test("25 per page, Older and Newer by cursor, filterable, with the total; only the user's own requests", async () => {
    const { handle, form, store } = makeApp();
    const cookie = cookieOf(await form("/signup", { email: "h@example.com", password: "long enough pw" }));
    const me = (await store.users.byEmail("h@example.com"))!;
    const other = await addUser(store, Date.now, { email: "other@example.com" });
    for (let i = 0; i < 30; i++) {
      store.requests.recordChat({ id: `chat_${i}`, userId: me.id, keyId: null, model: "builtin-chat", status: i % 3 === 0 ? "failed" : "succeeded", prompt: `p${i}`, errorMessage: i % 3 === 0 ? "boom <b>" : null }, 1_800_000_000_000 + i);
    }
    store.requests.recordChat({ id: "chat_other", userId: other.id, keyId: null, model: "builtin-chat", status: "succeeded", prompt: "secret of other" }, 1_800_000_000_000);
    const rows = async (path: string) => {
      const text = await (await handle(path, { headers: { cookie } })).text();
      return { count: (text.match(/<td class="prompt"/g) ?? []).length, text };
    };
    const linkOf = (text: string, rel: "prev" | "next") => new RegExp(`href="([^"]+)" rel="${rel}"`).exec(text)?.[1]?.replaceAll("&amp;", "&");
    const first = await rows("/credits");
    expect(first.count).toBe(25);
    expect(first.text).toContain("30 requests");
    expect(first.text).not.toContain("secret of other");
    // The newest page links to older rows only, by a cursor: the oldest row it shows (chat_5).
    expect(linkOf(first.text, "prev")).toBeUndefined();
    const older = linkOf(first.text, "next")!;
    expect(older).toBe(`/credits?older=${1_800_000_000_005}.chat_5`);
    const second = await rows(older);
    expect(second.count).toBe(5);
    expect(second.text).toContain("p0");
    expect(linkOf(second.text, "next")).toBeUndefined();
    // Newer leads back to the newest page.
    const back = await rows(linkOf(second.text, "prev")!);
    expect(back.count).toBe(25);
    expect(linkOf(back.text, "prev")).toBeUndefined();
    const failed = await rows("/credits?status=failed");
    expect(failed.count).toBe(10);
    expect(failed.text).toContain("10 requests");
    expect(failed.text).toContain("boom &lt;b&gt;");
    expect((await rows("/credits?kind=image")).count).toBe(0);
    expect((await rows("/credits?kind=bogus&page=-3")).count).toBe(25);
    // A cursor that does not parse (a hand-edited URL) shows the newest page; one past the end, nothing older.
    expect((await rows("/credits?older=tomorrow")).count).toBe(25);
    const past = await rows("/credits?older=1.chat_0");
    expect(past.count).toBe(0);
    expect(linkOf(past.text, "next")).toBeUndefined();
    expect(linkOf(past.text, "prev")).toBe("/credits?newer=1.chat_0");
  }, 30_000);
});
