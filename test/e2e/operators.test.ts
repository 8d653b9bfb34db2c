/**
 * The operator's workbench in real chromium against a real listening server, at 1280×800 and
 * 375×812: create a user, make a batch of redemption codes (shown once; the CSV downloaded and
 * read), the user redeems one on the credits page (and is refused the second time), the admin
 * revokes the user's key (the key then gets 401) and sets a new password (the user's session
 * ends), filters All requests by user and key, and sees each model's price. Every page is also
 * shot light and dark under test-artifacts/operators/ (look at them) and must not scroll
 * sideways.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import { createKey } from "../../src/core/accounts";
import { startTestServer, type TestServer } from "../support/server";

// Generous: a shared 2-core machine runs a browser, a server and other suites at once.
const TEST_TIMEOUT_MS = 180_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/operators");
const ADMIN_PASSWORD = "admin horse battery staple";
const SIZES = { laptop: { width: 1280, height: 800 }, phone: { width: 375, height: 812 } } as const;
type Size = keyof typeof SIZES;
type Scheme = "light" | "dark";

let server: TestServer;
let browser: Browser;
const adminEmail = "ops@example.com";

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer({
    toml: `
[server]
log_requests = false
builtin_image_price = 2

[workbench]
initial_credits = 0

[[upstreams]]
id = "acme"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
accounts = [{ id = "acme-main", api_key = "sk-upstream-secret" }]

[[models]]
id = "acme-premium"
kind = "image"
upstream = "acme"
price = 5
`,
  });
  await server.userWithKey({ email: adminEmail, role: "admin", password: ADMIN_PASSWORD });
  browser = await launchChromium();
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  await server?.close();
}, TEST_TIMEOUT_MS);

async function signedIn(email: string, password: string, size: Size, scheme: Scheme = "light"): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: SIZES[size], colorScheme: scheme, deviceScaleFactor: 1, acceptDownloads: true });
  const page = await context.newPage();
  page.on("dialog", (d) => (d.type() === "confirm" ? d.accept() : d.dismiss()));
  await signInThroughForm(page, server.url, email, password);
  return { context, page };
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** The page never scrolls sideways (a phone's content fits its width). */
async function expectNoSidewaysScroll(page: Page, where: string): Promise<void> {
  const width = await page.evaluate((): { scroll: number; viewport: number } => ({ scroll: document.scrollingElement!.scrollWidth, viewport: window.innerWidth }));
  expect({ where, scrollWidth: width.scroll }).toEqual({ where, scrollWidth: Math.min(width.scroll, width.viewport) });
}

async function alertText(page: Page): Promise<string> {
  return (await page.locator("main [role=alert], main .msg").allTextContents()).join(" | ");
}

describe("operators in a real browser", () => {
  for (const size of ["laptop", "phone"] as const) {
    test(`${size}: create a user, make codes, the user redeems one, revoke their key, reset their password, filter requests`, async () => {
      const userEmail = `member-${size}@example.com`;
      const userPassword = `first password for ${size}`;
      const admin = await signedIn(adminEmail, ADMIN_PASSWORD, size);
      const a = admin.page;
      try {
        // Create a user on the users page.
        await a.goto(`${server.url}/admin`);
        await a.locator("#new-email").fill(userEmail);
        await a.locator("#new-password").fill(userPassword);
        await a.locator("#new-credits").fill("3");
        await a.getByRole("button", { name: "Create user" }).click();
        await a.waitForURL(/\/admin\/users\/\d+\?done=created$/);
        expect(await alertText(a)).toContain("The user was created.");
        const user = (await server.services.store.users.byEmail(userEmail))!;
        expect(user.credits).toBe(3);
        await shot(a, `${size}-admin-user-created`);

        // A batch of codes, shown once; the CSV is downloaded and holds the same codes.
        await a.goto(`${server.url}/admin/codes`);
        await a.locator("#batch-name").fill(`${size} workshop`);
        await a.locator("#batch-credits").fill("15");
        await a.locator("#batch-count").fill("3");
        await a.locator("#batch-expiry").fill("30");
        await a.getByRole("button", { name: "Create codes" }).click();
        await a.locator("[data-testid=new-codes]").waitFor();
        const codes = (await a.locator("[data-testid=new-codes]").inputValue()).split("\n");
        expect(codes).toHaveLength(3);
        for (const c of codes) expect(c).toMatch(/^[2-9A-HJ-NP-Z]{5}(-[2-9A-HJ-NP-Z]{5}){3}$/);
        // The address bar no longer points at the POST: a reload shows the list, not a new batch.
        expect(new URL(a.url()).pathname).toBe("/admin/codes");
        await shot(a, `${size}-admin-codes-created`);
        await expectNoSidewaysScroll(a, "codes created");
        const [download] = await Promise.all([a.waitForEvent("download"), a.locator("[data-testid=codes-csv]").click()]);
        expect(download.suggestedFilename()).toMatch(/^atelier-codes-batch-\d+\.csv$/);
        const csv = readFileSync((await download.path())!, "utf8").trim().split(/\r?\n/);
        expect(csv[0]).toBe("code,credits,expires_at,batch_id,batch_name");
        expect(csv.slice(1).map((l) => l.split(",")[0])).toEqual(codes);
        await a.reload();
        const listed = await a.locator("main").textContent();
        for (const c of codes) expect(listed).not.toContain(c);
        expect(listed).toContain(`${size} workshop`);
        expect(listed).toContain("0 / 3");

        const { key } = await createKey(server.services.store, Date.now, user.id, `${size} script`);
        // The user redeems a code (typed in lower case), then tries it again.
        const member = await signedIn(userEmail, userPassword, size);
        const m = member.page;
        try {
          await m.goto(`${server.url}/credits`);
          await m.locator("#redeem-code").fill(codes[0]!.toLowerCase());
          await m.getByRole("button", { name: "Redeem" }).click();
          await m.waitForURL(/\/credits\?redeemed=\d+/);
          expect(await alertText(m)).toContain("Code redeemed: +15 credits.");
          expect(await m.locator("#balance").textContent()).toBe("18");
          expect(await m.locator("table.ledger").textContent()).toContain("+15");
          await shot(m, `${size}-user-redeemed`);
          await expectNoSidewaysScroll(m, "credits redeemed");
          await m.locator("#redeem-code").fill(codes[0]!);
          await m.getByRole("button", { name: "Redeem" }).click();
          await m.locator("#redeem [role=alert]").waitFor();
          expect(await m.locator("#redeem").textContent()).toContain("This code was already redeemed.");
          expect(await server.balance(user.id)).toBe(18);
          await shot(m, `${size}-user-redeem-refused`);

          // The admin sees the user's key with its spend, and revokes it: the key answers 401.
          const models = () => fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key.secret}` } });
          expect((await models()).status).toBe(200);
          const gen = await fetch(`${server.url}/v1/images/generations`, {
            method: "POST",
            headers: { authorization: `Bearer ${key.secret}`, "content-type": "application/json" },
            body: JSON.stringify({ model: "builtin-image", prompt: `a ${size} sketch`, size: "256x256" }),
          });
          expect(gen.status).toBe(200);
          await a.goto(`${server.url}/admin/users/${user.id}`);
          expect(await a.locator("[data-testid=user-spent]").textContent()).toBe("2 credits");
          expect(await a.locator("[data-testid=user-balance]").textContent()).toBe("16 credits");
          await shot(a, `${size}-admin-user-page`);
          await expectNoSidewaysScroll(a, "user page");
          await a.getByRole("button", { name: `Revoke key ${size} script of ${userEmail}` }).click();
          await a.waitForURL(/done=revoked$/);
          expect((await models()).status).toBe(401);

          // A new password ends the user's session; the new one signs in.
          await a.locator("#reset-password").fill(`second password for ${size}`);
          await a.getByRole("button", { name: "Set password" }).click();
          await a.waitForURL(/done=password$/);
          expect(await alertText(a)).toContain("the user's sessions have ended");
          await m.goto(`${server.url}/credits`);
          expect(new URL(m.url()).pathname).toBe("/signin");
        } finally {
          await member.context.close();
        }
        (await signedIn(userEmail, `second password for ${size}`, size)).context.close();

        // All requests, filtered by the user and then by their (revoked) key.
        await a.goto(`${server.url}/admin/requests`);
        await a.locator("#f-user").fill(userEmail);
        await a.getByRole("button", { name: "Filter" }).click();
        await a.waitForURL(/user=/);
        const rows = a.locator("table.requests tbody tr");
        expect(await rows.count()).toBe(1);
        expect(await rows.first().textContent()).toContain(`a ${size} sketch`);
        await a.locator("#f-key").fill(`${key.prefix}…`);
        await a.getByRole("button", { name: "Filter" }).click();
        await a.waitForURL(/key=/);
        expect(await a.locator("table.requests tbody tr").count()).toBe(1);
        await shot(a, `${size}-admin-requests-filtered`);
        await expectNoSidewaysScroll(a, "requests filtered");

        // The models page shows each model's price.
        await a.goto(`${server.url}/admin/models`);
        const prices = await a.locator("[data-testid=price]").allTextContents();
        expect(prices.map((p) => p.trim())).toEqual(["2", "free", "5"]);
      } finally {
        await admin.context.close();
      }
    }, TEST_TIMEOUT_MS);
  }

  for (const scheme of ["light", "dark"] as const) {
    test(`every new page at both sizes, ${scheme}: shot and no sideways scroll`, async () => {
      const userId = (await server.services.store.users.byEmail("member-laptop@example.com"))!.id;
      for (const size of ["laptop", "phone"] as const) {
        const admin = await signedIn(adminEmail, ADMIN_PASSWORD, size, scheme);
        try {
          for (const path of ["/admin", `/admin/users/${userId}`, "/admin/codes", "/admin/requests?user=member-laptop%40example.com", "/admin/models", "/credits"]) {
            await admin.page.goto(`${server.url}${path}`);
            const name = path.replace(/\?.*/, "").replace(/\/\d+$/, "-one").replaceAll("/", "-");
            await shot(admin.page, `${size}-${scheme}${name}`);
            await expectNoSidewaysScroll(admin.page, `${size} ${scheme} ${path}`);
          }
        } finally {
          await admin.context.close();
        }
      }
    }, TEST_TIMEOUT_MS);
  }
});
