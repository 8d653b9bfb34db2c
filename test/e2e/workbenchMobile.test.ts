/**
 * The workbench on a phone (375×812) and a laptop (1280×800), light and dark, in real chromium
 * against a real listening server with enough rows to matter (several keys, users, requests,
 * upstream accounts). On every page: every action in the main content is inside the viewport
 * after scrolling to it and is the element under its own centre (not covered), the page never
 * scrolls sideways, and table rows stay a sane height. The bar is one row on a phone and its
 * menu opens with the keyboard. Then the small things: an HTML 404 for browsers, /setup while
 * signed in, the credit notice naming whom and how much, the Edit tab's Size, the result
 * scrolled into view, the chat kept across a reload. Screenshots go to test-artifacts/mobile/.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import { startTestServer, type TestServer } from "../support/server";

const TEST_TIMEOUT_MS = 180_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/mobile");
const PASSWORD = "correct horse battery";
const PHONE = { width: 375, height: 812 };
const LAPTOP = { width: 1280, height: 800 };
/** A table row (a card on a phone) taller than this is a layout failure, not content. */
const MAX_ROW_PX = { phone: 520, laptop: 240 };

let server: TestServer;
let browser: Browser;
// 23 characters: the badge used to share a 22-character box with the email and cut it.
const admin = { email: "root@studio.example.com", userId: 0, key: "" };
const user = { email: "painter-on-the-go@example.com", userId: 0, key: "" };

type Scheme = "light" | "dark";
type Size = "phone" | "laptop";

async function signedIn(who: { email: string }, size: Size, scheme: Scheme): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: size === "phone" ? PHONE : LAPTOP, colorScheme: scheme, deviceScaleFactor: 1 });
  const page = await context.newPage();
  page.on("dialog", (d) => d.dismiss());
  await signInThroughForm(page, server.url, who.email, PASSWORD);
  return { context, page };
}

interface LayoutReport {
  scrollWidth: number;
  innerWidth: number;
  checked: number;
  problems: string[];
  tallestRow: number;
}

/** Scrolls every visible control of main into view and checks it is on screen and uncovered. */
async function layoutReport(page: Page): Promise<LayoutReport> {
  return page.evaluate(async () => {
    const problems: string[] = [];
    const describe = (el: Element) =>
      `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ""}[${(el.getAttribute("aria-label") ?? el.textContent ?? "").trim().slice(0, 40)}]`;
    const controls = document.querySelectorAll("main a[href], main button, main input:not([type=hidden]), main select, main textarea, main summary");
    let checked = 0;
    for (const el of controls) {
      if (!(el instanceof HTMLElement) || !el.checkVisibility({ checkVisibilityCSS: true })) continue;
      const box = el.getBoundingClientRect();
      // Visually-hidden helpers (1×1 px) are for screen readers, not fingers.
      if (box.width <= 1 || box.height <= 1) continue;
      el.scrollIntoView({ block: "center", inline: "nearest" });
      await new Promise((r) => requestAnimationFrame(() => r(null)));
      const r = el.getBoundingClientRect();
      checked++;
      if (r.left < -0.5 || r.right > innerWidth + 0.5) {
        problems.push(`${describe(el)} is off-screen horizontally (${Math.round(r.left)}..${Math.round(r.right)} of ${innerWidth})`);
        continue;
      }
      const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
      const label = el.id ? document.querySelector(`label[for="${el.id}"]`) : null;
      if (!hit || (hit !== el && !el.contains(hit) && !(label && (hit === label || label.contains(hit))))) {
        problems.push(`${describe(el)} is covered by ${hit ? describe(hit) : "nothing"}`);
      }
    }
    let tallestRow = 0;
    for (const row of document.querySelectorAll("main tbody > tr")) tallestRow = Math.max(tallestRow, row.getBoundingClientRect().height);
    window.scrollTo(0, 0);
    return { scrollWidth: document.scrollingElement!.scrollWidth, innerWidth, checked, problems, tallestRow };
  });
}

async function expectUsableLayout(page: Page, size: Size, where: string): Promise<void> {
  const report = await layoutReport(page);
  expect({ where, problems: report.problems }).toEqual({ where, problems: [] });
  expect({ where, scrollWidth: report.scrollWidth }).toEqual({ where, scrollWidth: Math.min(report.scrollWidth, report.innerWidth) });
  expect({ where, tallestRow: Math.min(report.tallestRow, MAX_ROW_PX[size]) }).toEqual({ where, tallestRow: report.tallestRow });
  expect(report.checked).toBeGreaterThan(0);
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

const USER_PAGES = ["/playground", "/gallery", "/credits", "/usage", "/keys", "/webhooks"];
const ADMIN_PAGES = ["/admin", "/admin/requests", "/admin/upstreams", "/admin/models", "/admin/codes"];
/** Pages of one thing (an image, a request, a key, a user), filled in once the rows exist. */
const DETAIL_PAGES = { user: [] as string[], admin: [] as string[] };

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer({
    // An upstream that refuses connections: its model's requests fail (error rows, refunds) and
    // its accounts collect failures, so the pool page has long cells to lay out.
    toml: `
[server]
log_requests = false

[[upstreams]]
id = "acme"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
accounts = [
  { id = "acme-main", api_key = "sk-upstream-secret-1" },
  { id = "acme-backup-with-a-long-name", api_key = "sk-upstream-secret-2" },
  { id = "acme-third", api_key = "sk-upstream-secret-3" },
]

[[models]]
id = "acme-image"
kind = "image"
upstream = "acme"
`,
  });
  Object.assign(admin, await server.userWithKey({ email: admin.email, role: "admin", credits: 50, password: PASSWORD }));
  Object.assign(user, await server.userWithKey({ email: user.email, credits: 20, password: PASSWORD }));
  for (let i = 0; i < 6; i++) await server.userWithKey({ email: `member-${i}-of-the-studio@example.com`, credits: i, password: PASSWORD });
  const { createKey } = await import("../../src/core/accounts");
  for (const name of ["laptop script", "ci pipeline for the nightly renders", "phone"]) await createKey(server.services.store, Date.now, user.userId, name);

  const post = (path: string, body: unknown) =>
    fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${user.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  for (let i = 0; i < 3; i++) expect((await post("/v1/images/generations", { model: "builtin-image", prompt: `a lighthouse at dusk, take ${i}`, size: "256x256" })).status).toBe(200);
  for (let i = 0; i < 2; i++) expect((await post("/v1/images/generations", { model: "acme-image", prompt: "a very long prompt ".repeat(12), size: "1024x1024" })).status).toBeGreaterThanOrEqual(500);
  expect((await post("/v1/chat/completions", { model: "builtin-chat", messages: [{ role: "user", content: "hello" }] })).status).toBe(200);

  const { store } = server.services;
  const image = (await store.images.listForUser(user.userId, Date.now(), 1, 0))[0];
  const request = (await store.requests.list({ userId: user.userId, limit: 1, offset: 0 }))[0];
  const key = (await store.keys.listForUser(user.userId)).find((k) => k.revoked_at === null);
  expect(image && request && key).toBeTruthy();
  DETAIL_PAGES.user.push(`/gallery/${image!.id}`, `/credits/requests/${request!.id}`, `/keys/${key!.id}`);
  DETAIL_PAGES.admin.push(`/admin/users/${user.userId}`);

  browser = await launchChromium();
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  await server?.close();
}, TEST_TIMEOUT_MS);

describe("the workbench on a phone and a laptop", () => {
  for (const scheme of ["light", "dark"] as const) {
    for (const size of ["phone", "laptop"] as const) {
      test(`${size}, ${scheme}: every action on every user and admin page is on screen and clickable`, async () => {
        const signedUser = await signedIn(user, size, scheme);
        const signedAdmin = await signedIn(admin, size, scheme);
        try {
          for (const [who, page, paths] of [
            ["user", signedUser.page, [...USER_PAGES, ...DETAIL_PAGES.user]],
            ["admin", signedAdmin.page, [...ADMIN_PAGES, ...DETAIL_PAGES.admin]],
          ] as const) {
            for (const path of paths) {
              const answer = await page.goto(`${server.url}${path}`);
              expect({ path, status: answer!.status() }).toEqual({ path, status: 200 });
              await shot(page, `${size}-${scheme}-${who}${path.replace(/\/(\d+|[A-Za-z0-9_-]{12,})$/u, "-detail").replaceAll("/", "-")}`);
              await expectUsableLayout(page, size, `${who} ${path}`);
            }
          }
          // The playground's other tabs are pages of their own to a user.
          const p = signedUser.page;
          await p.goto(`${server.url}/playground`);
          for (const tab of ["Edit", "Chat"]) {
            await p.getByRole("tab", { name: tab }).click();
            await shot(p, `${size}-${scheme}-user-playground-${tab.toLowerCase()}`);
            await expectUsableLayout(p, size, `playground ${tab}`);
          }
        } finally {
          await signedUser.context.close();
          await signedAdmin.context.close();
        }
      }, TEST_TIMEOUT_MS);
    }
  }

  test("signed out: sign in, sign up, setup and the 404 page fit both sizes, light and dark", async () => {
    for (const size of ["phone", "laptop"] as const) {
      for (const scheme of ["light", "dark"] as const) {
        const context = await browser.newContext({ viewport: size === "phone" ? PHONE : LAPTOP, colorScheme: scheme });
        try {
          const page = await context.newPage();
          for (const path of ["/signin", "/signup", "/setup", "/nope"]) {
            await page.goto(`${server.url}${path}`);
            await shot(page, `${size}-${scheme}-signed-out${path.replaceAll("/", "-")}`);
            await expectUsableLayout(page, size, `signed out ${path}`);
            const bar = await page.locator("header.bar").boundingBox();
            expect(bar!.height).toBeLessThan(64);
          }
        } finally {
          await context.close();
        }
      }
    }
  }, TEST_TIMEOUT_MS);

  test("on a phone the bar is one row; its menu opens from the keyboard and every link in it works", async () => {
    const { context, page } = await signedIn(admin, "phone", "light");
    try {
      await page.goto(`${server.url}/keys`);
      const bar = await page.locator("header.bar").boundingBox();
      expect(bar!.height).toBeLessThan(64);
      const mainLink = page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Admin" });
      expect(await mainLink.isVisible()).toBe(false);
      // Keyboard: the skip link first, then the brand, then the menu button.
      await page.keyboard.press("Tab");
      await page.keyboard.press("Tab");
      await page.keyboard.press("Tab");
      expect(await page.evaluate(() => document.activeElement?.textContent?.trim())).toBe("Menu");
      await page.keyboard.press("Enter");
      expect(await mainLink.isVisible()).toBe(true);
      await shot(page, "phone-light-menu-open");
      const links = await page.evaluate(() => {
        const out: { text: string; ok: boolean }[] = [];
        for (const el of document.querySelectorAll("header .menu a, header .menu button")) {
          const r = el.getBoundingClientRect();
          const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
          out.push({ text: el.textContent!.trim(), ok: r.left >= 0 && r.right <= innerWidth && !!hit && (hit === el || el.contains(hit)) });
        }
        return out;
      });
      expect(links.map((l) => l.text)).toEqual(expect.arrayContaining(["Playground", "Gallery", "Credits & history", "API keys", "Webhooks", "Admin", "API", "Sign out"]));
      expect(links.filter((l) => !l.ok)).toEqual([]);
      // The whole email is readable, next to the badge.
      expect(await page.locator(".who").evaluate((el) => el.scrollWidth <= el.clientWidth)).toBe(true);
      await mainLink.click();
      await page.waitForURL(`${server.url}/admin`);
      expect(await mainLink.isVisible()).toBe(false);
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("on a laptop the navigation is inline (no menu button) and the admin email is not cut by its badge", async () => {
    const { context, page } = await signedIn(admin, "laptop", "light");
    try {
      await page.goto(`${server.url}/keys`);
      expect(await page.locator("header .menu > summary").isVisible()).toBe(false);
      for (const name of ["Playground", "API keys", "Admin"]) expect(await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name }).isVisible()).toBe(true);
      expect(await page.locator(".who").evaluate((el) => el.scrollWidth <= el.clientWidth)).toBe(true);
      expect(await page.locator(".who-line .badge").textContent()).toBe("admin");
      const bar = await page.locator("header.bar").boundingBox();
      expect(bar!.height).toBeLessThan(64);
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);
});

describe("the small things", () => {
  test("a browser asking for a page that does not exist gets an HTML 404 in the workbench frame, at both sizes", async () => {
    for (const size of ["phone", "laptop"] as const) {
      for (const scheme of ["light", "dark"] as const) {
        const { context, page } = await signedIn(user, size, scheme);
        try {
          const answer = await page.goto(`${server.url}/nope/<b>x</b>`);
          expect(answer!.status()).toBe(404);
          expect(answer!.headers()["content-type"]).toStartWith("text/html");
          expect(await page.locator("h1").textContent()).toBe("Page not found");
          // The path is shown as text, never markup; the signed-in bar is there to go on from.
          expect(await page.locator("main [role=alert]").textContent()).toContain("/nope/%3Cb%3Ex%3C/b%3E");
          expect(await page.locator("main b").count()).toBe(0);
          expect(await page.locator("#balance").count()).toBe(1);
          await shot(page, `${size}-${scheme}-404`);
          await expectUsableLayout(page, size, "404");
        } finally {
          await context.close();
        }
      }
    }
  }, TEST_TIMEOUT_MS);

  test("/setup while signed in says who is signed in, not 'Sign in'", async () => {
    const { context, page } = await signedIn(admin, "phone", "light");
    try {
      const answer = await page.goto(`${server.url}/setup`);
      expect(answer!.status()).toBe(410);
      expect(await page.locator("main").textContent()).toContain(`you are signed in as ${admin.email}`);
      expect(await page.locator("main").getByRole("link", { name: "Sign in" }).count()).toBe(0);
      await page.locator("main").getByRole("link", { name: "Go to Admin" }).click();
      await page.waitForURL(`${server.url}/admin`);
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("granting and deducting credits says to whom and how many; a hand-made notice link claims nothing", async () => {
    const target = await server.userWithKey({ email: "grant-target@example.com", credits: 2, password: PASSWORD });
    const { context, page } = await signedIn(admin, "phone", "light");
    try {
      await page.goto(`${server.url}/admin?q=grant-target`);
      const row = page.locator('tr[data-user-email="grant-target@example.com"]');
      await row.locator('input[name="amount"]').fill("5");
      await row.getByRole("button", { name: "Grant credits to grant-target@example.com" }).click();
      await page.waitForURL(/done=granted/);
      expect(await page.locator("main [role=status]").first().textContent()).toBe("Granted 5 credits to grant-target@example.com; grant-target@example.com now has 7 credits.");
      expect(await server.balance(target.userId)).toBe(7);
      await shot(page, "phone-light-admin-granted");

      await page.locator('tr[data-user-email="grant-target@example.com"] input[name="amount"]').fill("1");
      await page.getByRole("button", { name: "Deduct credits from grant-target@example.com" }).click();
      await page.waitForURL(/done=deducted/);
      expect(await page.locator("main [role=status]").first().textContent()).toBe("Deducted 1 credit from grant-target@example.com; grant-target@example.com now has 6 credits.");

      // A link that names a ledger row of someone else, or none, gets only the plain notice.
      const url = new URL(page.url());
      url.searchParams.set("user", String(user.userId));
      await page.goto(url.toString());
      expect(await page.locator("main [role=status]").first().textContent()).toBe("Credits deducted.");
      await page.goto(`${server.url}/admin?done=granted&user=${target.userId}&entry=999999`);
      expect(await page.locator("main [role=status]").first().textContent()).toBe("Credits granted.");
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("the Edit tab offers no Size the model would ignore, and sends none; an upstream model gets its Size", async () => {
    const { context, page } = await signedIn(user, "laptop", "light");
    try {
      await page.goto(`${server.url}/playground`);
      await page.getByRole("tab", { name: "Edit" }).click();
      await page.locator("#edit-model").selectOption("builtin-image");
      expect(await page.locator("#edit-size").isVisible()).toBe(false);
      expect(await page.locator("#edit-size-kept").textContent()).toContain("keep the image's size");
      // The generate tab keeps its Size for the same model.
      expect(await page.locator("#gen-size").count()).toBe(1);

      // The multipart body's field names, as the page hands them to fetch (the wire body of a
      // FormData with files is not visible to playwright's request events).
      await page.evaluate(() => {
        const w = window as unknown as { __fields?: string[]; fetch: (input: RequestInfo | URL, init?: RequestInit) => Promise<Response> };
        const original = w.fetch.bind(window);
        w.fetch = (input, init) => {
          if (init?.body instanceof FormData) w.__fields = Array.from(init.body.keys());
          return original(input, init);
        };
      });
      const { makePng } = await import("../support/images");
      await page.locator("#edit-image").setInputFiles({ name: "base.png", mimeType: "image/png", buffer: Buffer.from(makePng(96, 64)) });
      await page.locator("#edit-prompt").fill("a starry sky");
      await page.getByRole("button", { name: "Edit (1 credit)" }).click();
      await page.locator("#edit-result img[data-image]").waitFor({ state: "visible", timeout: 30_000 });
      const fields = await page.evaluate(() => (window as unknown as { __fields?: string[] }).__fields ?? []);
      expect(fields).toContain("prompt");
      expect(fields).toContain("model");
      expect(fields).not.toContain("size");
      expect(await page.locator("#edit-result [data-meta]").textContent()).toContain("96x64");

      await page.locator("#edit-model").selectOption("acme-image");
      expect(await page.locator("#edit-size").isVisible()).toBe(true);
      expect(await page.locator("#edit-size-kept").isVisible()).toBe(false);
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("at 1280×800 a finished image is scrolled into view, Download included", async () => {
    const { context, page } = await signedIn(user, "laptop", "light");
    try {
      await page.goto(`${server.url}/playground`);
      await page.locator("#gen-prompt").fill("a lighthouse at dusk");
      await page.locator("#gen-model").selectOption("builtin-image");
      await page.locator("#gen-size").selectOption("1024x1024");
      await page.getByRole("button", { name: "Generate (1 credit)" }).click();
      const image = page.locator("#gen-result img[data-image]");
      await image.waitFor({ state: "visible", timeout: 30_000 });
      // Bounded wait for the scroll that follows the image's decode.
      let inView = false;
      for (let i = 0; i < 50 && !inView; i++) {
        inView = await page.evaluate(() => {
          const figure = document.querySelector("#gen-result [data-figure]")!.getBoundingClientRect();
          const download = document.querySelector("#gen-result [data-download]")!.getBoundingClientRect();
          return figure.top >= 0 && download.bottom <= innerHeight && (document.scrollingElement?.scrollTop ?? 0) > 0;
        });
        if (!inView) await Bun.sleep(100);
      }
      expect(inView).toBe(true);
      await page.screenshot({ path: join(ARTIFACTS, "laptop-light-result-in-view.png") });
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("the chat conversation survives a reload (sessionStorage, per user) and sign-out forgets it", async () => {
    const { context, page } = await signedIn(user, "phone", "dark");
    try {
      await page.goto(`${server.url}/playground`);
      await page.getByRole("tab", { name: "Chat" }).click();
      await page.locator("#chat-input").fill("hello there");
      await page.getByRole("button", { name: "Send" }).click();
      await page.locator("[data-chat-log] li.assistant").waitFor({ timeout: 30_000 });
      const before = await page.locator("[data-chat-log] li").allTextContents();
      expect(before.length).toBe(2);
      expect(before[0]).toBe("hello there");

      await page.reload();
      await page.getByRole("tab", { name: "Chat" }).click();
      expect(await page.locator("[data-chat-log] li").allTextContents()).toEqual(before);
      await shot(page, "phone-dark-chat-after-reload");
      expect(await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith("atelier.chat.")))).toEqual([`atelier.chat.${user.userId}`]);

      // The conversation continues with its history: the next request carries all of it.
      let sentMessages = 0;
      page.on("request", (r) => {
        if (r.url().endsWith("/v1/chat/completions")) sentMessages = (JSON.parse(r.postData() ?? "{}").messages ?? []).length;
      });
      await page.locator("#chat-input").fill("and again");
      await page.getByRole("button", { name: "Send" }).click();
      await page.locator("[data-chat-log] li.assistant").nth(1).waitFor({ timeout: 30_000 });
      expect(sentMessages).toBe(3);

      // Signing out (through the phone menu) forgets it.
      await page.getByText("Menu", { exact: true }).click();
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.waitForURL(/\/signin/);
      expect(await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith("atelier.chat.")))).toEqual([]);
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);
});
