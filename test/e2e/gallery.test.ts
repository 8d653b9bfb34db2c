/**
 * The gallery in a real browser (Debian's chromium, playwright-core) against a real server: 25
 * images made through the API show as thumbnails (loaded, newest first, 24 a page), the second
 * page, Copy link (a signed link that works without a session), Delete (the row and its file go,
 * the balance and the history stay), a history row's link to its image, another user's image
 * refused, and the admin's storage column. Screenshots at 1280×800 and 375×812, light and dark,
 * under test-artifacts/gallery/ (look at them).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import { blobKey } from "../../src/core/imageArchive";
import { startTestServer, type TestServer } from "../support/server";

const TEST_TIMEOUT_MS = 120_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/gallery");
const PASSWORD = "gallery horse battery";
const XSS = `<script>window.__pwned = 1</script>`;
const COUNT = 25;

let server: TestServer;
let browser: Browser;
let owner: { userId: number; email: string; key: string };
const ids: string[] = []; // oldest first

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function newPage(viewport: { width: number; height: number }, colorScheme: "light" | "dark" = "light"): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport, colorScheme, permissions: ["clipboard-read", "clipboard-write"] });
  const page = await context.newPage();
  page.on("dialog", async (d) => {
    if (d.type() === "confirm") return d.accept();
    throw new Error(`unexpected ${d.type()} dialog: ${d.message()}`);
  });
  return { context, page };
}

async function signIn(page: Page, email: string): Promise<void> {
  await signInThroughForm(page, server.url, email, PASSWORD);
  await page.waitForURL(/playground/);
}

/** Scrolls through the page so lazy thumbnails load, then checks every one decoded. */
async function thumbnailsLoaded(page: Page): Promise<number[]> {
  const count = await page.locator(".gallery-item img").count();
  for (let i = 0; i < count; i++) await page.locator(".gallery-item img").nth(i).scrollIntoViewIfNeeded();
  await page.waitForFunction(() => [...document.querySelectorAll<HTMLImageElement>(".gallery-item img")].every((img) => img.complete), null, { timeout: 30_000 });
  await page.evaluate(() => window.scrollTo(0, 0));
  return page.locator(".gallery-item img").evaluateAll((imgs) => imgs.map((img) => (img as HTMLImageElement).naturalWidth));
}

const tileIds = (page: Page) => page.locator(".gallery-item").evaluateAll((els) => els.map((e) => e.getAttribute("data-image-id")!));

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer({ config: (c) => void (c.server.log_requests = false) });
  owner = await server.userWithKey({ credits: COUNT + 5, password: PASSWORD });
  const client = new OpenAI({ apiKey: owner.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
  for (let i = 0; i < COUNT; i++) {
    // Mostly small; every fifth is large enough to be scaled down for its thumbnail.
    const size = i % 5 === 0 ? "640x448" : i % 2 === 0 ? "96x128" : "128x96";
    const prompt = i === COUNT - 1 ? `the newest: a lantern ${XSS} and a very long description that goes on and on about the harbour, the boats, the gulls and the evening light` : `picture ${i}: a kite over dunes`;
    const { data } = await client.images.generate({ model: "builtin-image", prompt, size: size as "1024x1024" }).withResponse();
    ids.push((data as typeof data & { image_id: string }).image_id);
  }
  browser = await launchChromium();
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  await server?.close();
}, TEST_TIMEOUT_MS);

describe("the gallery in a real browser", () => {
  test("thumbnails newest first, 24 a page, each loaded; the second page; injected markup shown as text", async () => {
    const { context, page } = await newPage({ width: 1280, height: 800 });
    try {
      await signIn(page, owner.email);
      await page.getByRole("link", { name: "Gallery" }).click();
      await page.waitForURL(/\/gallery$/);
      expect(await tileIds(page)).toEqual(ids.slice(1).reverse());
      const widths = await thumbnailsLoaded(page);
      expect(widths.length).toBe(24);
      expect(widths.every((w) => w > 0 && w <= 256)).toBe(true);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
      const newest = page.locator(".gallery-item").first();
      expect(await newest.locator(".gallery-prompt").textContent()).toContain("<script>");
      expect(await newest.locator(".gallery-meta").textContent()).toContain("builtin-image");
      await expect_text(page, ".pager", "Page 1 of 2 · 25 images");
      await shot(page, "01-gallery-desktop-light");

      // The large ones are scaled down to 256 on the long side, as PNG.
      const big = ids[20]!;
      const res = await page.request.get(`${server.url}/gallery/thumb/${big}`);
      expect(res.status()).toBe(200);
      expect(res.headers()["content-type"]).toBe("image/png");
      expect(res.headers()["cache-control"]).toBe("private, max-age=86400");
      const again = await page.request.get(`${server.url}/gallery/thumb/${big}`, { headers: { "if-none-match": res.headers()["etag"]! } });
      expect(again.status()).toBe(304);

      await page.getByRole("link", { name: "Older →" }).click();
      await page.waitForURL(/page=2/);
      expect(await tileIds(page)).toEqual([ids[0]!]);
      expect((await thumbnailsLoaded(page))[0]).toBeGreaterThan(0);
      await shot(page, "02-gallery-page2-desktop");
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("dark scheme, and the phone layout", async () => {
    const dark = await newPage({ width: 1280, height: 800 }, "dark");
    const phone = await newPage({ width: 375, height: 812 });
    const phoneDark = await newPage({ width: 375, height: 812 }, "dark");
    try {
      for (const [p, name] of [[dark.page, "03-gallery-desktop-dark"], [phone.page, "04-gallery-phone-light"], [phoneDark.page, "05-gallery-phone-dark"]] as const) {
        await signIn(p, owner.email);
        await p.goto(`${server.url}/gallery`);
        expect((await thumbnailsLoaded(p)).every((w) => w > 0)).toBe(true);
        await shot(p, name);
        await p.screenshot({ path: join(ARTIFACTS, `${name}-viewport.png`) });
      }
      // Nothing sideways on a phone.
      expect(await phone.page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
      await phone.page.locator(".gallery-item .thumb").first().click();
      await phone.page.waitForURL(new RegExp(`/gallery/${ids[COUNT - 1]}$`));
      await phone.page.waitForFunction(() => (document.querySelector<HTMLImageElement>(".gallery-detail img")?.naturalWidth ?? 0) > 0);
      expect(await phone.page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
      await shot(phone.page, "06-image-phone");
    } finally {
      await dark.context.close();
      await phone.context.close();
      await phoneDark.context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("Copy link copies a signed link that works without a session", async () => {
    const { context, page } = await newPage({ width: 1280, height: 800 });
    try {
      await signIn(page, owner.email);
      await page.goto(`${server.url}/gallery`);
      const button = page.locator(".gallery-item").first().getByRole("button", { name: "Copy link" });
      await button.click();
      await page.waitForFunction(() => document.querySelector("[data-copied]") !== null);
      const link = await page.evaluate(() => navigator.clipboard.readText());
      expect(link.startsWith(`${server.url}/files/images/${ids[COUNT - 1]}.png?expires=`)).toBe(true);
      const res = await fetch(link);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("image/png");
      const download = page.locator(".gallery-item").first().getByTestId("download");
      expect(await download.getAttribute("download")).toBe(`atelier-${ids[COUNT - 1]}.png`);
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("Delete removes the image and its file; the balance and the history stay", async () => {
    const { context, page } = await newPage({ width: 1280, height: 800 });
    try {
      await signIn(page, owner.email);
      const victim = ids[0]!;
      const row = (await server.services.store.images.get(victim))!;
      const file = join(server.dataDir, "images", blobKey(row.sha256, row.mime));
      expect(existsSync(file)).toBe(true);
      const balance = await server.balance(owner.userId);
      await page.goto(`${server.url}/gallery?page=2`);
      await page.locator(`.gallery-item[data-image-id="${victim}"]`).getByRole("button", { name: /^Delete/ }).click();
      await page.waitForURL(/done=deleted/);
      await expect_text(page, ".msg.notice", "The image was deleted.");
      // Page 2 is now empty, so the last page with images is shown.
      expect(page.url()).toContain("page=1");
      expect(await tileIds(page)).not.toContain(victim);
      await expect_text(page, ".pager", "Page 1 of 1 · 24 images");
      expect(await server.services.store.images.get(victim)).toBeNull();
      expect(existsSync(file)).toBe(false);
      expect(await server.balance(owner.userId)).toBe(balance);
      expect((await server.services.store.requests.get(row.requestId))?.status).toBe("succeeded");
      await shot(page, "07-gallery-after-delete");
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("a history row links to its image; another user's image is not found", async () => {
    const { context, page } = await newPage({ width: 1280, height: 800 });
    const other = await server.userWithKey({ credits: 0, password: PASSWORD });
    const stranger = await newPage({ width: 1280, height: 800 });
    try {
      await signIn(page, owner.email);
      await page.goto(`${server.url}/credits`);
      const links = page.getByTestId("history-image");
      // The newest 25 rows: 24 kept images (the oldest was deleted above).
      expect(await links.count()).toBe(24);
      await links.first().click();
      await page.waitForURL(new RegExp(`/gallery/${ids[COUNT - 1]}$`));
      await page.waitForFunction(() => (document.querySelector<HTMLImageElement>(".gallery-detail img")?.naturalWidth ?? 0) > 0);
      expect(await page.locator(".gallery-full-prompt").textContent()).toContain(`${XSS} and a very long description`);
      await shot(page, "08-image-desktop");

      await signIn(stranger.page, other.email);
      const res = await stranger.page.goto(`${server.url}/gallery/${ids[COUNT - 1]}`);
      expect(res!.status()).toBe(404);
      expect((await stranger.page.request.get(`${server.url}/gallery/thumb/${ids[COUNT - 1]}`)).status()).toBe(404);
      // Deleting someone else's image does nothing.
      const csrf = await stranger.page.locator('meta[name="csrf-token"]').getAttribute("content");
      const del = await stranger.page.request.post(`${server.url}/gallery/${ids[COUNT - 1]}/delete`, { form: { _csrf: csrf! }, headers: { origin: server.url }, maxRedirects: 0 });
      expect(del.status()).toBe(303);
      expect(await server.services.store.images.get(ids[COUNT - 1]!)).not.toBeNull();
      await stranger.page.goto(`${server.url}/gallery`);
      await expect_text(stranger.page, "main", "No images yet");
    } finally {
      await context.close();
      await stranger.context.close();
    }
  }, TEST_TIMEOUT_MS);

  test("admins see images and bytes per user", async () => {
    const admin = await server.userWithKey({ role: "admin", password: PASSWORD });
    const { context, page } = await newPage({ width: 1280, height: 800 });
    try {
      await signIn(page, admin.email);
      await page.goto(`${server.url}/admin`);
      const usage = (await server.services.store.images.usageByUser()).get(owner.userId)!;
      expect(usage.images).toBe(24);
      const cell = page.locator(`tr[data-user-email="${owner.email}"] [data-testid="storage"]`);
      expect(await cell.textContent()).toMatch(/^24 · \d+(\.\d)? (kB|MB)$/);
      expect(await cell.getAttribute("title")).toBe(`${usage.bytes} bytes`);
      await shot(page, "09-admin-storage");
    } finally {
      await context.close();
    }
  }, TEST_TIMEOUT_MS);
});

async function expect_text(page: Page, selector: string, part: string): Promise<void> {
  const el = page.locator(selector).first();
  await el.waitFor({ timeout: 15_000 });
  expect(await el.textContent()).toContain(part);
}
