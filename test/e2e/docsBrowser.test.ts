/**
 * Swagger UI at /docs in a real browser (Debian's chromium) with every request that does not go
 * to our server blocked: it renders the API from /openapi.json and "Try it out" calls /v1/models
 * with a bearer key. Proves the page works offline, from the binary's embedded assets.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chromium, type Browser } from "playwright-core";
import { startTestServer, type TestServer } from "../support/server";

let server: TestServer;
let browser: Browser;
let key: string;

beforeAll(async () => {
  server = await startTestServer();
  ({ key } = await server.userWithKey());
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe("Swagger UI in chromium, offline", () => {
  test("renders every operation and Try it out calls the API with a bearer key", async () => {
    const context = await browser.newContext();
    const blocked: string[] = [];
    const origin = new URL(server.url).origin;
    await context.route("**/*", (route) => {
      const url = route.request().url();
      if (url.startsWith(origin) || url.startsWith("data:")) return route.continue();
      blocked.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.setDefaultTimeout(20_000);
    const pageErrors: string[] = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));

    await page.goto(`${server.url}/docs`);
    const listModels = page.locator("#operations-Models-listModels");
    await listModels.waitFor({ state: "visible", timeout: 30_000 });
    const paths = await page.locator(".opblock-summary-path").evaluateAll((els) => els.map((e) => e.getAttribute("data-path")));
    expect(paths).toEqual(expect.arrayContaining(["/v1/models", "/v1/models/{model}", "/v1/chat/completions", "/v1/images/generations", "/v1/images/edits"]));

    // Authorize with the key, then Try it out → Execute on GET /v1/models.
    await page.locator("button.authorize").first().click();
    await page.locator(".auth-container input").first().fill(key);
    await page.locator(".auth-btn-wrapper button.authorize").click();
    await page.locator(".auth-btn-wrapper button.btn-done").click();
    await listModels.locator(".opblock-summary").click();
    // /docs starts with "Try it out" enabled (tryItOutEnabled), so Execute is there at once.
    await listModels.locator("button.execute").click();
    const status = listModels.locator(".live-responses-table .response .response-col_status").first();
    await status.waitFor({ state: "visible", timeout: 30_000 });
    expect((await status.innerText()).trim()).toStartWith("200");
    const live = await listModels.locator(".live-responses-table").first().innerText();
    expect(live).toContain('"object": "list"');
    expect(live).toContain("builtin-chat");

    expect(blocked).toEqual([]);
    expect(pageErrors).toEqual([]);
    await context.close();
  });
});
