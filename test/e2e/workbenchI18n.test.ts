/**
 * The workbench in Chinese in real chromium (its locale sends Accept-Language: zh-CN) against a
 * real listening server: sign-up with a form error, the playground's script messages (a form
 * error, the status and the result line), the language switch in the header (to English and
 * back, remembered across pages), and every page at 375×812 and 1280×800, light and dark, with
 * no key names on screen and no sideways scrolling. Screenshots go to test-artifacts/i18n/
 * (look at them: CJK text must not break the layout).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import { EN } from "../../src/workbench/i18n/catalog";
import { startTestServer, type TestServer } from "../support/server";

const TEST_TIMEOUT_MS = 300_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/i18n");
const PASSWORD = "correct horse battery";
const PHONE = { width: 375, height: 812 };
const LAPTOP = { width: 1280, height: 800 };
const KEYS = Object.keys(EN);
/** The same keys as the client scripts look them up (without `client.`). */
const CLIENT_KEYS = KEYS.filter((k) => k.startsWith("client.")).map((k) => k.slice("client.".length));

let server: TestServer;
let browser: Browser;
let imageId = "";
let painterId = 0;
let keyId = 0;
let requestId = "";
const adminEmail = "root@studio.example.com";
const userEmail = "painter@example.com";

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Catalog keys on screen (a message never looked up), and whether the page scrolls sideways. */
async function screenProblems(page: Page): Promise<string[]> {
  const { text, lang, scrollWidth, innerWidth } = await page.evaluate(() => ({
    text: document.body.innerText,
    lang: document.documentElement.lang,
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
  }));
  const problems = [...KEYS, ...CLIENT_KEYS].filter((k) => text.includes(k)).map((k) => `key on screen: ${k}`);
  if (lang !== "zh-CN") problems.push(`lang ${lang}`);
  if (scrollWidth > innerWidth + 1) problems.push(`scrolls sideways: ${scrollWidth} > ${innerWidth}`);
  return problems;
}

async function zhContext(size: { width: number; height: number }, scheme: "light" | "dark" = "light"): Promise<BrowserContext> {
  return browser.newContext({ viewport: size, colorScheme: scheme, locale: "zh-CN", deviceScaleFactor: 1 });
}

async function signedIn(email: string, size: { width: number; height: number }, scheme: "light" | "dark"): Promise<{ context: BrowserContext; page: Page }> {
  const context = await zhContext(size, scheme);
  const page = await context.newPage();
  page.on("dialog", (d) => d.dismiss());
  await signInThroughForm(page, server.url, email, PASSWORD);
  return { context, page };
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer({
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
  await server.userWithKey({ email: adminEmail, role: "admin", password: PASSWORD, credits: 10 });
  const painter = await server.userWithKey({ email: userEmail, password: PASSWORD, credits: 10 });
  const res = await fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${painter.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "builtin-image", prompt: "黄昏时海边的灯塔，水彩风格", size: "256x256" }),
  });
  expect(res.status).toBe(200);
  imageId = (await server.services.store.images.listForUser(painter.userId, Date.now(), 1, 0))[0]!.id;
  painterId = painter.userId;
  keyId = (await server.services.store.keys.listForUser(painterId))[0]!.id;
  requestId = (await server.services.store.requests.list({ userId: painterId, limit: 1, offset: 0 }))[0]!.id;
  browser = await launchChromium();
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  await server?.close();
}, TEST_TIMEOUT_MS);

describe("the workbench in Chinese", () => {
  test("sign up, the playground's script messages, and the language switch", async () => {
    const context = await zhContext(LAPTOP);
    const page = await context.newPage();
    await page.goto(`${server.url}/signup`);
    expect(await page.evaluate(() => document.documentElement.lang)).toBe("zh-CN");
    expect(await page.locator("h1").textContent()).toBe("注册账户");
    await page.locator("#email").fill("newcomer@example.com");
    await page.locator("#password").fill("short");
    await page.locator("#password").evaluate((el) => el.removeAttribute("minlength"));
    await page.getByRole("button", { name: "注册" }).click();
    await page.getByRole("alert").filter({ hasText: "密码至少需要 10 个字符。" }).waitFor({ timeout: 30_000 });
    await shot(page, "signup-error-laptop");
    await page.locator("#password").fill(PASSWORD);
    await page.getByRole("button", { name: "注册" }).click();
    await page.waitForURL(`${server.url}/playground`);
    expect(await page.locator("#balance-unit").textContent()).toBe("积分");

    // The script's own messages: a form error, then the result line after a real generation.
    await page.getByRole("button", { name: "生成（1 积分）" }).click();
    await page.locator("#generate-form [data-form-error]").filter({ hasText: "请先填写提示词。" }).waitFor({ timeout: 15_000 });
    await page.locator("#gen-prompt").fill("雪山下的小木屋");
    await page.locator("#gen-size").selectOption("256x256");
    await page.getByRole("button", { name: "生成（1 积分）" }).click();
    await page.locator("#gen-result img[data-image]").waitFor({ state: "visible", timeout: 90_000 });
    const meta = (await page.locator("#gen-result [data-meta]").textContent()) ?? "";
    expect(meta).toContain("生成用时");
    expect(meta).toContain("剩余 2 积分");
    expect(await screenProblems(page)).toEqual([]);
    await shot(page, "playground-generated-laptop");

    // The switch: to English, back on the same page, and remembered on the next one.
    await page.getByTestId("language-switch").click();
    await page.waitForFunction(() => document.documentElement.lang === "en");
    expect(new URL(page.url()).pathname).toBe("/playground");
    expect(await page.locator("h1").textContent()).toBe("Playground");
    await page.goto(`${server.url}/keys`);
    expect(await page.locator("h1").textContent()).toBe("API keys");
    expect(await page.getByTestId("language-switch").textContent()).toBe("中文");
    await page.getByTestId("language-switch").click();
    await page.waitForFunction(() => document.documentElement.lang === "zh-CN");
    expect(new URL(page.url()).pathname).toBe("/keys");
    expect(await page.locator("h1").textContent()).toBe("API 密钥");
    await context.close();
  }, TEST_TIMEOUT_MS);

  for (const [size, viewport] of [["phone", PHONE], ["laptop", LAPTOP]] as const) {
    for (const scheme of ["light", "dark"] as const) {
      test(`every page at ${viewport.width}×${viewport.height}, ${scheme}: no keys on screen, no sideways scrolling`, async () => {
        const name = (page: string) => `${page}-${size}-${scheme}`;
        const out = await zhContext(viewport, scheme);
        const anon = await out.newPage();
        for (const path of ["/signin", "/signup"]) {
          await anon.goto(`${server.url}${path}`);
          expect([path, await screenProblems(anon)]).toEqual([path, []]);
          await shot(anon, name(path.slice(1)));
        }
        await out.close();
        const pages: [string, string][] = [
          [userEmail, "/playground"],
          [userEmail, "/gallery"],
          [userEmail, `/gallery/${imageId}`],
          [userEmail, "/credits"],
          [userEmail, "/keys"],
          [userEmail, `/keys/${keyId}`],
          [userEmail, `/credits/requests/${requestId}`],
          [userEmail, "/webhooks"],
          [adminEmail, "/admin"],
          [adminEmail, `/admin/users/${painterId}`],
          [adminEmail, "/admin/requests"],
          [adminEmail, "/admin/upstreams"],
          [adminEmail, "/admin/models"],
          [adminEmail, "/admin/codes"],
        ];
        for (const email of [userEmail, adminEmail]) {
          const { context, page } = await signedIn(email, viewport, scheme);
          for (const [who, path] of pages) {
            if (who !== email) continue;
            await page.goto(`${server.url}${path}`);
            expect([path, await screenProblems(page)]).toEqual([path, []]);
            await shot(page, name(path.slice(1).replace(/\//g, "-").replace(/img_[A-Za-z0-9]+/, "image").replace(/users-\d+/, "user").replace(/keys-\d+/, "key").replace(/requests-req_[A-Za-z0-9]+/, "request")));
          }
          if (size === "phone" && email === userEmail) {
            // On a phone the account bar (with the switch) is in the menu.
            await page.goto(`${server.url}/credits`);
            await page.locator("details.menu > summary").click();
            await page.getByTestId("language-switch").waitFor({ state: "visible" });
            await shot(page, name("menu-open"));
          }
          await context.close();
        }
      }, TEST_TIMEOUT_MS);
    }
  }
});
