/**
 * The workbench in a real browser (Debian's chromium driven by playwright-core) against a real
 * listening server: first-admin setup, sign-up, keys (read from the page, used with the official
 * openai client, revoked → 401), the playground (an image appears, the balance drops by 1; chat
 * answers), an admin grant the user then sees, CSRF refusals, `<script>` shown as text, and a
 * screenshot of every page under test-artifacts/workbench/ (look at them).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { type Browser, type BrowserContext, type Locator, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import { addUser } from "../../src/core/accounts";
import { makePng } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";

// Generous: a shared 2-core machine runs a browser, a server and other suites at once.
const TEST_TIMEOUT_MS = 90_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/workbench");
const XSS = `<script>window.__pwned = 1</script>`;
const PASSWORD = "correct horse battery";
const ADMIN_PASSWORD = "admin horse battery staple";

let server: TestServer;
let browser: Browser;
let evil: ReturnType<typeof Bun.serve>;
let userContext: BrowserContext;
let adminContext: BrowserContext;
let user: Page;
let admin: Page;
const userEmail = `painter-${Date.now()}@example.com`;
const adminEmail = "root@example.com";
let apiKey = "";

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Fails the test if any page ever runs injected script (an alert or our marker). */
function watchForInjection(page: Page): void {
  page.on("dialog", async (d) => {
    if (d.type() === "confirm") return d.accept();
    throw new Error(`unexpected ${d.type()} dialog: ${d.message()}`);
  });
}

/** Waits (bounded) until the element's text contains the expected part. */
async function containsText(locator: Locator, part: string): Promise<void> {
  const first = locator.first();
  await first.waitFor({ timeout: 15_000 });
  for (let i = 0; i < 150; i++) {
    if ((await first.textContent())?.includes(part)) return;
    await Bun.sleep(100);
  }
  expect(await first.textContent()).toContain(part);
}

async function balanceShown(page: Page): Promise<number> {
  return Number(await page.locator("#balance").textContent());
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer({
    // One upstream that is never called, so that the admin's pool page has an account to show.
    toml: `
[server]
log_requests = false

[workbench]
initial_credits = 3

[[upstreams]]
id = "acme"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
accounts = [{ id = "acme-main", api_key = "sk-upstream-secret" }]

[[models]]
id = "acme-image"
kind = "image"
upstream = "acme"
`,
  });
  // Another origin on loopback (a different port): where the cross-origin forms come from.
  evil = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const target = new URL(req.url).searchParams.get("target") ?? "";
      const page = `<!doctype html><form id="f" method="post" action="${server.url}${target}">
        <input name="name" value="planted-by-evil"><input name="amount" value="1000"><input name="op" value="grant"></form>
        <script>document.getElementById("f").submit()</script>`;
      return new Response(page, { headers: { "content-type": "text/html" } });
    },
  });
  // playwright's launch() starts chromium with a fresh temporary --user-data-dir of its own.
  browser = await launchChromium();
  userContext = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  adminContext = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  user = await userContext.newPage();
  admin = await adminContext.newPage();
  watchForInjection(user);
  watchForInjection(admin);
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  evil?.stop(true);
  await server?.close();
}, TEST_TIMEOUT_MS);

describe("workbench in a real browser", () => {
  test("the first admin comes from the one-time setup token in the server log", async () => {
    const line = server.logs.find((l) => l.includes("setup_token"));
    expect(line).toBeDefined();
    const token = JSON.parse(line!).setup_token as string;

    await admin.goto(`${server.url}/setup`);
    await shot(admin, "01-setup");
    await admin.getByLabel("Setup token").fill("not-the-token");
    await admin.getByLabel("Admin email").fill(adminEmail);
    await admin.getByLabel(/^Password/).fill(ADMIN_PASSWORD);
    await admin.getByRole("button", { name: "Create admin" }).click();
    await containsText(admin.getByRole("alert"), "setup token is not valid");

    await admin.getByLabel("Setup token").fill(token);
    await admin.getByLabel(/^Password/).fill(ADMIN_PASSWORD);
    await admin.getByRole("button", { name: "Create admin" }).click();
    await admin.waitForURL(`${server.url}/admin`);
    expect(await admin.locator(".who").textContent()).toContain(adminEmail);

    // The token works once.
    const again = await fetch(`${server.url}/setup`);
    expect(again.status).toBe(410);
  }, TEST_TIMEOUT_MS);

  test("sign up, create a key on the page and use it with the openai client", async () => {
    await user.goto(`${server.url}/`);
    await user.waitForURL(/\/signin/);
    await shot(user, "02-signin");
    await user.getByRole("link", { name: "Create one" }).click();
    await shot(user, "03-signup");
    await user.getByLabel("Email").fill(userEmail);
    await user.getByLabel(/^Password/).fill("short");
    // The browser's own minlength check would stop this; remove it to see the server's answer.
    await user.locator("#password").evaluate((el) => el.removeAttribute("minlength"));
    await user.getByRole("button", { name: "Create account" }).click();
    await containsText(user.getByRole("alert"), "at least 10 characters");
    await user.getByLabel(/^Password/).fill(PASSWORD);
    await user.getByRole("button", { name: "Create account" }).click();
    await user.waitForURL(`${server.url}/playground`);
    expect(await balanceShown(user)).toBe(3);
    expect(await user.locator(".who").textContent()).toContain(userEmail);

    // The account bar's "API" entry leads to the keys page.
    await user.getByRole("link", { name: "API", exact: true }).click();
    await user.waitForURL(`${server.url}/keys`);
    await user.getByLabel("Name").fill(`laptop ${XSS}`);
    await user.getByRole("button", { name: "Create key" }).click();
    apiKey = (await user.getByTestId("new-key").inputValue()).trim();
    expect(apiKey).toMatch(/^sk-atl-[0-9A-Za-z]{43}$/);
    await user.getByText("only time the full key is shown").waitFor();
    // The name is text, not markup.
    expect(await user.locator("td.name").first().textContent()).toBe(`laptop ${XSS}`);
    expect(await user.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    await shot(user, "04-keys-new-key");
    // A reload neither posts the form again (no second key) nor shows the full key again.
    expect(new URL(user.url()).pathname).toBe("/keys");
    await user.reload();
    expect(await user.getByTestId("new-key").count()).toBe(0);
    expect(await user.locator("td.name").count()).toBe(1);

    const client = new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain("builtin-image");

    // Shown once: a reload lists the key by prefix only.
    await user.goto(`${server.url}/keys`);
    expect(await user.getByTestId("new-key").count()).toBe(0);
    expect(await user.content()).not.toContain(apiKey);
    expect(await user.locator("td.mono").first().textContent()).toBe(`${apiKey.slice(0, 15)}…`);
  }, TEST_TIMEOUT_MS);

  test("the playground generates an image through /v1 with the session; the balance drops by 1", async () => {
    await user.goto(`${server.url}/playground`);
    const before = await balanceShown(user);
    await user.getByLabel("Prompt").first().fill(`a lighthouse at dusk ${XSS}`);
    await user.locator("#gen-size").selectOption("256x256");
    // Reference images are checked in the browser against the API's limits before any request.
    const tinyPng = Buffer.from(makePng(32, 32));
    const oversized = Buffer.alloc(10 * 1024 * 1024 + 1);
    tinyPng.copy(oversized);
    await user.locator("#gen-refs").setInputFiles([
      { name: "ok.png", mimeType: "image/png", buffer: tinyPng },
      { name: "notes.webp", mimeType: "image/webp", buffer: Buffer.from("not an image at all") },
      { name: "huge.png", mimeType: "image/png", buffer: oversized },
    ]);
    await containsText(user.locator("#generate-form [data-form-error]"), "notes.webp is not a PNG, JPEG or WebP image.");
    await containsText(user.locator("#generate-form [data-form-error]"), "huge.png is larger than 10 MiB.");
    expect(await user.locator("[data-ref-list] li").count()).toBe(1);
    await user.getByRole("button", { name: "Generate (1 credit)" }).click();
    const image = user.locator("#gen-result img[data-image]");
    await image.waitFor({ state: "visible", timeout: 60_000 });
    const size = await image.evaluate((img: HTMLImageElement) => ({ w: img.naturalWidth, h: img.naturalHeight }));
    expect(size).toEqual({ w: 256, h: 256 });
    await containsText(user.locator("#gen-result [data-meta]"), `${before - 1} credits left`);
    expect(await balanceShown(user)).toBe(before - 1);
    expect(await user.locator("#gen-result [data-download]").getAttribute("href")).toMatch(/^blob:/);
    await shot(user, "05-playground-generated");
    // The same page on a phone-sized screen.
    await user.setViewportSize({ width: 390, height: 844 });
    await shot(user, "05b-playground-narrow");
    await user.setViewportSize({ width: 1280, height: 860 });

    // A failing generation (the upstream at 127.0.0.1:9 refuses connections) shows the API's
    // error and leaves the balance as it was: the credit is refunded.
    // Keyboard only: Enter on the button; afterwards the focus is back on it, not lost to <body>.
    await user.locator("#gen-model").selectOption("acme-image");
    await user.getByRole("button", { name: "Generate (1 credit)" }).focus();
    await user.keyboard.press("Enter");
    const failure = user.locator("#gen-result [data-error]");
    await failure.waitFor({ state: "visible", timeout: 60_000 });
    expect(await user.evaluate(() => document.activeElement?.textContent?.trim())).toBe("Generate (1 credit)");
    expect((await failure.textContent())!.length).toBeGreaterThan(10);
    expect(await user.locator("#gen-result [data-figure]").isHidden()).toBe(true);
    await containsText(user.locator("#balance"), String(before - 1));
    expect(await server.balance((await server.services.store.users.byEmail(userEmail))!.id)).toBe(before - 1);
    await shot(user, "05c-playground-error");
    await user.locator("#gen-model").selectOption("builtin-image");

    // The history shows the prompt as text.
    await user.goto(`${server.url}/credits?kind=image`);
    expect(await user.locator("td.prompt").first().textContent()).toContain(XSS);
    expect(await user.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(Number(await user.getByTestId("balance-big").textContent())).toBe(before - 1);
    await shot(user, "06-credits-history");
  }, TEST_TIMEOUT_MS);

  test("the playground edits an uploaded image with a painted mask, and chats", async () => {
    await user.goto(`${server.url}/playground`);
    await user.getByRole("tab", { name: "Edit" }).click();
    // An image made in the page itself, handed to the file input.
    const png = await user.evaluate(async () => {
      const c = document.createElement("canvas");
      c.width = 128;
      c.height = 96;
      const ctx = c.getContext("2d")!;
      ctx.fillStyle = "#2a6";
      ctx.fillRect(0, 0, 128, 96);
      const blob: Blob = await new Promise((r) => c.toBlob((b) => r(b!), "image/png"));
      return Array.from(new Uint8Array(await blob.arrayBuffer()));
    });
    await user.getByLabel(/^Image to edit/).setInputFiles({ name: "green.png", mimeType: "image/png", buffer: Buffer.from(png) });
    const mask = user.locator("canvas[data-mask]");
    await mask.waitFor({ state: "visible" });
    const box = (await mask.boundingBox())!;
    await user.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5);
    await user.mouse.down();
    await user.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5, { steps: 5 });
    await user.mouse.up();
    await user.locator("#edit-prompt").fill("paint a red stripe");
    await user.locator("#edit-size").selectOption("auto").catch(() => undefined);
    const before = await balanceShown(user);
    await user.getByRole("button", { name: "Edit (1 credit)" }).click();
    const image = user.locator("#edit-result img[data-image]");
    await image.waitFor({ state: "visible", timeout: 60_000 });
    expect(await balanceShown(user)).toBe(before - 1);
    await shot(user, "07-playground-edit");

    // A file that is not an image is refused in the browser, before any request.
    await user.getByLabel(/^Image to edit/).setInputFiles({ name: "notes.png", mimeType: "image/png", buffer: Buffer.from("just text") });
    await containsText(user.locator("#edit-form [data-form-error]"), "not a PNG, JPEG or WebP");

    await user.getByRole("tab", { name: "Chat" }).click();
    await user.getByLabel("Message").fill(`hello ${XSS}`);
    await user.getByRole("button", { name: "Send" }).click();
    await user.locator(".chat-log li.assistant").first().waitFor({ timeout: 30_000 });
    expect(await user.locator(".chat-log li.user").first().textContent()).toBe(`hello ${XSS}`);
    expect(await user.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    await shot(user, "08-playground-chat");
  }, TEST_TIMEOUT_MS);

  test("an admin grants credits and the user sees the new balance", async () => {
    const before = await server.balance((await server.services.store.users.byEmail(userEmail))!.id);
    await admin.goto(`${server.url}/admin?q=${encodeURIComponent("painter-")}`);
    const row = admin.locator(`tr[data-user-email="${userEmail}"]`);
    await row.getByLabel(`Credits for ${userEmail}`).fill("5");
    await row.getByLabel(`Note for ${userEmail}`).fill(`thanks ${XSS}`);
    await row.getByRole("button", { name: "Grant" }).click();
    await admin.waitForURL(/done=granted/);
    await containsText(admin.getByRole("status"), `Granted 5 credits to ${userEmail}`);
    expect(Number(await admin.locator(`tr[data-user-email="${userEmail}"] [data-testid=credits]`).textContent())).toBe(before + 5);
    await shot(admin, "09-admin-users");

    await user.goto(`${server.url}/credits`);
    expect(await balanceShown(user)).toBe(before + 5);
    const ledgerNote = user.locator("table.ledger tbody tr").first();
    await containsText(ledgerNote, `thanks ${XSS}`);
    await containsText(ledgerNote, "+5");

    // Deducting more than the balance is refused with a clear message and changes nothing.
    await admin.goto(`${server.url}/admin`);
    const row2 = admin.locator(`tr[data-user-email="${userEmail}"]`);
    await row2.getByLabel(`Credits for ${userEmail}`).fill("100000");
    await row2.getByRole("button", { name: "Deduct" }).click();
    await containsText(admin.getByRole("alert"), "Cannot deduct 100000");
    expect(await server.balance((await server.services.store.users.byEmail(userEmail))!.id)).toBe(before + 5);
    expect(await server.services.store.credits.ledgerSum((await server.services.store.users.byEmail(userEmail))!.id)).toBe(before + 5);

    for (const [path, name] of [["/admin/requests", "10-admin-requests"], ["/admin/upstreams", "11-admin-upstreams"], ["/admin/models", "12-admin-models"]] as const) {
      await admin.goto(`${server.url}${path}`);
      await shot(admin, name);
    }
    await containsText(admin.locator("main"), "builtin-image");
    await admin.goto(`${server.url}/admin/upstreams`);
    await containsText(admin.locator("main"), "acme-main");
    await containsText(admin.locator("main"), "Last failure");
    expect(await admin.content()).not.toContain("sk-upstream-secret");

    // On a 375 px phone no page scrolls sideways (wide tables scroll inside their own box).
    await admin.setViewportSize({ width: 375, height: 740 });
    for (const path of ["/playground", "/credits", "/keys", "/admin", "/admin/requests", "/admin/upstreams", "/admin/models"]) {
      await admin.goto(`${server.url}${path}`);
      expect({ path, width: await admin.evaluate(() => document.documentElement.scrollWidth) }).toEqual({ path, width: 375 });
    }
    await shot(admin, "12b-admin-models-phone");
    await admin.goto(`${server.url}/admin`);
    await shot(admin, "12c-admin-users-phone");
    await admin.setViewportSize({ width: 1280, height: 860 });
    // Users are not admins.
    const res = await user.goto(`${server.url}/admin`);
    expect(res?.status()).toBe(403);
  }, TEST_TIMEOUT_MS);

  test("cross-origin form posts to state-changing routes are rejected (CSRF)", async () => {
    const userId = (await server.services.store.users.byEmail(userEmail))!.id;
    const keysBefore = (await server.services.store.keys.listForUser(userId)).length;
    const balanceBefore = await server.balance(userId);

    // The session cookie is sent (127.0.0.1 on another port is the same site), so only the
    // CSRF checks stand in the way.
    const response = user.waitForResponse((r) => r.url() === `${server.url}/keys` && r.request().method() === "POST");
    await user.goto(`http://127.0.0.1:${evil.port}/?target=/keys`);
    expect((await response).status()).toBe(403);
    await containsText(user.locator("main"), "Request rejected");
    expect((await server.services.store.keys.listForUser(userId)).length).toBe(keysBefore);

    const adminUserRow = (await server.services.store.users.byEmail(userEmail))!;
    const adminResponse = admin.waitForResponse((r) => r.url().includes("/admin/users/") && r.request().method() === "POST");
    await admin.goto(`http://127.0.0.1:${evil.port}/?target=/admin/users/${adminUserRow.id}/credits`);
    expect((await adminResponse).status()).toBe(403);
    expect(await server.balance(userId)).toBe(balanceBefore);

    // A cross-origin fetch to /v1 with the session cookie is refused too and charges nothing.
    await user.goto(`http://127.0.0.1:${evil.port}/nothing`).catch(() => undefined);
    await user.evaluate(async (url) => {
      await fetch(`${url}/v1/images/generations`, {
        method: "POST",
        credentials: "include",
        headers: { "content-type": "text/plain" },
        body: JSON.stringify({ prompt: "stolen" }),
      }).catch(() => undefined);
    }, server.url);
    expect(await server.balance(userId)).toBe(balanceBefore);

    // Same origin but without the token: refused.
    const cookie = (await userContext.cookies(server.url)).find((c) => c.name === "atelier_session")!;
    const noToken = await fetch(`${server.url}/keys`, {
      method: "POST",
      headers: { cookie: `atelier_session=${cookie.value}`, origin: server.url, "content-type": "application/x-www-form-urlencoded" },
      body: "name=no-token",
    });
    expect(noToken.status).toBe(403);
    const noHeader = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { cookie: `atelier_session=${cookie.value}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "no csrf header" }),
    });
    expect(noHeader.status).toBe(403);
    expect((await noHeader.json()).error.code).toBe("csrf_token_invalid");
    expect(await server.balance(userId)).toBe(balanceBefore);
    expect((await server.services.store.keys.listForUser(userId)).length).toBe(keysBefore);
  }, TEST_TIMEOUT_MS);

  test("sign-in is throttled per account and never reveals whether an email is registered", async () => {
    const attempt = (email: string, password: string) =>
      fetch(`${server.url}/signin`, {
        method: "POST",
        redirect: "manual",
        headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ email, password }),
      });
    const known = await attempt(userEmail, "wrong password!!");
    const unknown = await attempt("nobody-here@example.com", "wrong password!!");
    expect(known.status).toBe(401);
    expect(unknown.status).toBe(401);
    const alert = (html: string) => /role="alert">([^<]*)</.exec(html)?.[1];
    expect(alert(await known.text())).toBe(alert(await unknown.text()));
    for (let i = 0; i < 4; i++) await attempt(userEmail, "wrong password!!");
    const throttled = await attempt(userEmail, PASSWORD);
    expect(throttled.status).toBe(429);
    expect(await throttled.text()).toContain("Too many sign-in attempts");
  }, TEST_TIMEOUT_MS);

  test("revoking the key asks for confirmation, then the key gets 401; sign-out ends the session", async () => {
    await user.goto(`${server.url}/keys`);
    await user.getByRole("button", { name: /^Revoke key/ }).first().click();
    await user.waitForURL(/revoked=1/);
    await containsText(user.locator("main"), "revoked");
    await shot(user, "13-keys-revoked");
    const client = new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const error = await client.models.list().then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((error as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401);

    const cookie = (await userContext.cookies(server.url)).find((c) => c.name === "atelier_session")!;
    expect(cookie.httpOnly).toBe(true);
    expect(cookie.sameSite).toBe("Lax");
    await user.getByRole("button", { name: "Sign out" }).click();
    await user.waitForURL(/signin\?signed_out=1/);
    const stale = await fetch(`${server.url}/session`, { headers: { cookie: `atelier_session=${cookie.value}` } });
    expect(stale.status).toBe(401);
    await shot(user, "14-signed-out");
  }, TEST_TIMEOUT_MS);

  test("the playground after the session ended, or with a page from an earlier session, says so (not 'send an API key')", async () => {
    // A fresh account: the throttling test above has used up the painter's sign-in attempts.
    const email = "returning@example.com";
    await addUser(server.services.store, Date.now, { email, password: PASSWORD, credits: 3 });
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    try {
      const page = await context.newPage();
      watchForInjection(page);
      const signIn = async (p: Page) => {
        await signInThroughForm(p, server.url, email, PASSWORD);
        await p.waitForURL(/playground/);
      };
      await signIn(page);
      const before = await server.balance((await server.services.store.users.byEmail(email))!.id);
      await context.clearCookies();
      await page.getByLabel("Prompt").first().fill("after the session ended");
      await page.getByRole("button", { name: "Generate (1 credit)" }).click();
      await containsText(page.locator("#gen-result [data-error]"), "Your session has ended. Sign in again");

      // Signed in again in another tab: this page still holds the old session's CSRF token.
      await signIn(await context.newPage());
      await page.getByRole("button", { name: "Generate (1 credit)" }).click();
      await containsText(page.locator("#gen-result [data-error]"), "This page belongs to an earlier session. Reload it");
      expect(await server.balance((await server.services.store.users.byEmail(email))!.id)).toBe(before);
      await shot(page, "15-playground-session-ended");
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);
});
