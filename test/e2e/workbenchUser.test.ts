/**
 * The user's workbench pages in a real browser (Debian's chromium, playwright-core) against a
 * real server: a key created with an expiry, a credit cap and a model allow-list (the code
 * examples carry the key and this server's base URL), the key used with the official openai
 * client until its cap (402) and outside its models (403), its spend in the list, an edit
 * (rename, raise the cap, allow chat) that takes effect at once; the usage dashboard's figures
 * equal GET /v1/usage; a request's detail page; the CSV export (escaping, formula injection
 * neutralised, only the user's rows). Screenshots at 1280×800 and 375×812, light and dark,
 * under test-artifacts/workbench-user/ (look at them); no page is wider than the phone.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import OpenAI from "openai";
import { type Browser, type BrowserContext, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import { utcDay } from "../../src/core/utcDays";
import { startTestServer, type TestServer } from "../support/server";
import { middayClock } from "../support/fakeClock";
import { until } from "../support/until";

const TEST_TIMEOUT_MS = 120_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/workbench-user");
const PASSWORD = "usage horse battery";
const XSS = `<script>window.__pwned = 1</script>`;
const FORMULA = `=HYPERLINK("http://evil.example","click"), "quoted"`;

// The server's clock, and the test's "today": the usage figures are per UTC day, and a run may cross a real midnight.
const clock = middayClock();
let server: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let owner: { userId: number; email: string; key: string };
let createdKey = "";

const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });

async function newPage(viewport: { width: number; height: number }, colorScheme: "light" | "dark"): Promise<{ context: BrowserContext; page: Page }> {
  const ctx = await browser.newContext({ viewport, colorScheme, permissions: ["clipboard-read", "clipboard-write"] });
  const p = await ctx.newPage();
  p.on("dialog", async (d) => {
    if (d.type() === "confirm") return d.accept();
    throw new Error(`unexpected ${d.type()} dialog: ${d.message()}`);
  });
  return { context: ctx, page: p };
}

async function signIn(p: Page): Promise<void> {
  await signInThroughForm(p, server.url, owner.email, PASSWORD);
  await p.waitForURL(/playground/);
}

/** The page at desktop and phone size, light and dark: screenshots, and nothing wider than the viewport. */
async function shootEverySize(path: string, name: string): Promise<void> {
  const sizes = [
    { viewport: { width: 1280, height: 800 }, tag: "desktop" },
    { viewport: { width: 375, height: 812 }, tag: "phone" },
  ];
  for (const { viewport, tag } of sizes) {
    for (const scheme of ["light", "dark"] as const) {
      const { context: ctx, page: p } = await newPage(viewport, scheme);
      try {
        await signIn(p);
        await p.goto(`${server.url}${path}`);
        await p.screenshot({ path: join(ARTIFACTS, `${name}-${tag}-${scheme}.png`), fullPage: true });
        const width = await p.evaluate(() => document.documentElement.scrollWidth);
        expect(width).toBeLessThanOrEqual(viewport.width);
        expect(await p.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
      } finally {
        await ctx.close();
      }
    }
  }
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer({
    clock,
    // An upstream that refuses every connection: its model's requests fail and are refunded.
    toml: `
[server]
log_requests = false

[[upstreams]]
id = "acme"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
accounts = [{ id = "acme-main", api_key = "sk-upstream-secret" }]

[[models]]
id = "acme/broken"
kind = "image"
upstream = "acme"
`,
  });
  owner = await server.userWithKey({ credits: 20, password: PASSWORD });
  browser = await launchChromium();
  ({ context, page } = await newPage({ width: 1280, height: 800 }, "light"));
  await signIn(page);
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  await context?.close();
  await browser?.close();
  await server?.close();
});

describe("API keys page", () => {
  test("create a key with an expiry, a cap and one model: shown once with code for curl, Node, Python and the AI SDK", async () => {
    await page.goto(`${server.url}/keys`);
    const expires = utcDay(Date.now() + 30 * 86_400_000);
    await page.getByLabel("Name").fill(`ci ${XSS}`);
    await page.locator("#key-expires").fill(expires);
    await page.locator("#key-cap").fill("2");
    await page.getByRole("checkbox", { name: /builtin-image/ }).check();
    await page.getByRole("button", { name: "Create key" }).click();
    createdKey = await page.getByTestId("new-key").inputValue();
    expect(createdKey).toMatch(/^sk-atl-[0-9A-Za-z]{43}$/);
    for (const id of ["curl", "node", "python", "ai-sdk"]) {
      const code = await page.getByTestId(`snippet-${id}`).inputValue();
      expect(code).toContain(createdKey);
      expect(code).toContain(`${server.url}/v1`);
      expect(code).toContain("builtin-image");
    }
    expect(await page.getByRole("link", { name: "API reference" }).first().getAttribute("href")).toBe("/docs");
    // The copy button puts the snippet on the clipboard.
    await page.getByRole("button", { name: "Copy the Python (openai) example" }).click();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toContain(`api_key="${createdKey}"`);
    await page.screenshot({ path: join(ARTIFACTS, "01-key-created-desktop-light.png"), fullPage: true });
    // After the POST the address is plain /keys again; the row shows the limits.
    await page.waitForURL((u) => u.pathname === "/keys");
    const row = page.locator("table.keys tbody tr").first();
    expect(await row.locator("td.name").textContent()).toBe(`ci ${XSS}`);
    expect(await row.getByTestId("key-spend").textContent()).toBe("0 / 2");
    expect(await row.textContent()).toContain(expires);
  }, TEST_TIMEOUT_MS);

  test("the key works until its cap (then 402), only for its model (403); the list shows its spend", async () => {
    const c = client(createdKey);
    await c.images.generate({ model: "builtin-image", prompt: FORMULA });
    await c.images.generate({ model: "builtin-image", prompt: "line one\nline two, with a comma" });
    const capped = (await c.images.generate({ model: "builtin-image", prompt: "third" }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(capped.status).toBe(402);
    expect(capped.code).toBe("key_credit_cap_reached");
    const denied = (await c.chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(denied.status).toBe(403);
    expect(denied.code).toBe("model_not_allowed");
    expect(await server.balance(owner.userId)).toBe(18);

    await page.goto(`${server.url}/keys`);
    const row = page.locator("table.keys tbody tr").first();
    expect(await row.getByTestId("key-spend").textContent()).toBe("2 / 2");
    expect(await row.textContent()).toContain("cap reached");
  }, TEST_TIMEOUT_MS);

  test("edit: rename, raise the cap and allow chat; the key follows at once", async () => {
    await page.goto(`${server.url}/keys`);
    await page.locator("table.keys tbody tr").first().getByRole("link", { name: /Edit key/ }).click();
    await page.waitForURL(/\/keys\/\d+$/);
    await page.screenshot({ path: join(ARTIFACTS, "02-key-edit-desktop-light.png"), fullPage: true });
    // A bad value is refused with a message, nothing saved.
    await page.locator("#edit-cap").fill("-3");
    await page.locator("#edit-cap").evaluate((el) => el.removeAttribute("min"));
    await page.getByRole("button", { name: "Save" }).click();
    expect(await page.getByRole("alert").textContent()).toContain("credit cap");
    await page.locator("#edit-name").fill("ci script v2");
    await page.locator("#edit-cap").fill("5");
    await page.getByRole("checkbox", { name: /builtin-chat/ }).check();
    await page.getByRole("button", { name: "Save" }).click();
    await page.waitForURL(/\/keys\?saved=1$/);
    const row = page.locator("table.keys tbody tr").first();
    expect(await row.locator("td.name").textContent()).toBe("ci script v2");
    expect(await row.getByTestId("key-spend").textContent()).toBe("2 / 5");

    const c = client(createdKey);
    const chat = await c.chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] });
    expect(chat.choices[0]!.message.content).toBeTruthy();
    await c.images.generate({ model: "builtin-image", prompt: "after the edit" });
    expect(await c.get("/me")).toMatchObject({ key: { name: "ci script v2", credit_cap: 5, credits_spent: 3, allowed_models: ["builtin-image", "builtin-chat"] } });
  }, TEST_TIMEOUT_MS);
});

describe("usage, request detail and CSV", () => {
  test("the dashboard shows the same figures as GET /v1/usage, by day, model and key", async () => {
    // A failure (refunded) from the user's other key.
    await client(owner.key).images.generate({ model: "acme/broken", prompt: "never drawn" }).catch(() => undefined);
    const api = (await client(owner.key).get("/usage")) as { totals: Record<string, number> };
    const byModel = (await client(owner.key).get("/usage", { query: { group_by: "model" } })) as { data: { group: string; images: number; failed: number }[] };
    expect(api.totals).toMatchObject({ images: 3, failed: 1, credits_spent: 3, chat_requests: 1 });

    await page.goto(`${server.url}/usage`);
    expect(await page.getByTestId("total-images").textContent()).toBe(String(api.totals.images));
    expect(await page.getByTestId("total-credits").textContent()).toBe(String(api.totals.credits_spent));
    // 4 succeeded (3 images, 1 chat) of 5 finished.
    expect(await page.getByTestId("success-rate").textContent()).toBe("80%");
    expect(await page.getByTestId("failure-rate").textContent()).toBe("20%");
    // Today's bar is drawn, with its figure in the bar's title.
    const titles = await page.getByTestId("chart-images").locator("rect title").allTextContents();
    expect(titles).toContain(`${utcDay(clock())}: 3 images`);
    expect(titles).toContain(`${utcDay(clock())}: 1 failed requests`);
    const modelRows = await page.getByTestId("usage-models").locator("tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent)));
    for (const m of byModel.data) expect(modelRows).toContainEqual(expect.arrayContaining([m.group, String(m.images), String(m.failed)]));
    const keyRows = await page.getByTestId("usage-keys").locator("tbody td.name").allTextContents();
    expect(keyRows.sort()).toEqual(["ci script v2", "test"]);

    // Per day by model and by key: every request was made today, so today's rows equal GET /v1/usage's
    // groups, and the key made with a cap spent exactly its 3 images.
    const today = utcDay(clock());
    const tableRows = (testId: string) => page.getByTestId(testId).locator("tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent)));
    const modelDays = await tableRows("usage-models-daily");
    const fullByModel = (await client(owner.key).get("/usage", { query: { group_by: "model" } })) as { data: { group: string; images: number; failed: number; credits_spent: number; requests: number }[] };
    expect(modelDays.sort()).toEqual(fullByModel.data.map((m) => [today, m.group, String(m.images), String(m.failed), String(m.credits_spent)]).sort());
    expect(modelDays).toContainEqual([today, "builtin-image", "3", "0", "3"]);
    expect(modelDays).toContainEqual([today, "acme/broken", "0", "1", "0"]);
    const keyDays = await tableRows("usage-keys-daily");
    expect(keyDays).toContainEqual([today, "ci script v2", "3", "0", "3"]);
    expect(keyDays).toContainEqual([today, "test", "0", "1", "0"]);
    // The stacked bars carry the same figures, one segment per model and per key.
    expect(await page.getByTestId("usage-models-daily-images").locator("rect title").allTextContents()).toEqual([`${today} · builtin-image: 3 images`]);
    expect(await page.getByTestId("usage-models-daily-credits").locator("rect title").allTextContents()).toEqual([`${today} · builtin-image: 3 credits spent`]);
    expect(await page.getByTestId("usage-keys-daily-credits").locator("rect title").allTextContents()).toEqual([`${today} · ci script v2: 3 credits spent`]);
    expect(await page.getByTestId("usage-keys-daily-images").locator("figcaption").textContent()).toContain("ci script v2");
  }, TEST_TIMEOUT_MS);

  test("a request's page: key, credits and refund, timings, the image", async () => {
    await page.goto(`${server.url}/credits`);
    // Newest first: the failed acme request, then the image made after the edit (then the chat).
    await page.getByTestId("request-link").first().click();
    await page.waitForURL(/\/credits\/requests\//);
    expect(await page.getByTestId("request-status").textContent()).toBe("failed");
    expect(await page.getByTestId("request-credits").textContent()).toContain("1 refunded");
    expect(await page.getByTestId("request-key").textContent()).toContain("test (sk-atl-");
    // Which upstream failed, and how, is for admins: a user's page names no upstream.
    expect(await page.getByTestId("request-upstream").count()).toBe(0);
    expect(await page.getByTestId("request-facts").textContent()).not.toContain("ECONNREFUSED");
    await page.goto(`${server.url}/credits`);
    await page.getByTestId("request-link").nth(1).click();
    await page.waitForURL(/\/credits\/requests\//);
    expect(await page.getByTestId("request-status").textContent()).toBe("succeeded");
    expect(await page.getByTestId("request-key").textContent()).toContain("ci script v2");
    await page.getByTestId("request-image").locator("img").evaluate((img: HTMLImageElement) => img.decode());
    expect(await page.getByTestId("request-image").locator("img").evaluate((img: HTMLImageElement) => img.naturalWidth)).toBeGreaterThan(0);

    // Another user's request is not shown.
    const other = await server.userWithKey({ credits: 2 });
    const theirs = await client(other.key).images.generate({ model: "builtin-image", prompt: "someone else's" }).withResponse();
    const theirId = theirs.response.headers.get("x-request-id")!;
    const res = await page.request.get(`${server.url}/credits/requests/${theirId}`);
    expect(res.status()).toBe(404);
    expect(await res.text()).not.toContain("someone else");
  }, TEST_TIMEOUT_MS);

  test("CSV export: every own row, quoted, formulas neutralised, nobody else's", async () => {
    const res = await page.request.get(`${server.url}/credits/history.csv`);
    expect(res.status()).toBe(200);
    expect(res.headers()["content-type"]).toBe("text/csv; charset=utf-8");
    expect(res.headers()["content-disposition"]).toMatch(/^attachment; filename="atelier-history-\d{4}-\d{2}-\d{2}\.csv"$/);
    const text = await res.text();
    const rows = parseCsv(text);
    const header = rows[0]!;
    expect(header.slice(0, 3)).toEqual(["id", "created_at", "finished_at"]);
    const body = rows.slice(1);
    expect(body.length).toBe(await server.services.store.requests.count({ userId: owner.userId }));
    const prompt = (r: string[]) => r[header.indexOf("prompt")];
    expect(body.map(prompt)).toContain(`'${FORMULA}`);
    expect(body.map(prompt)).toContain("line one\nline two, with a comma");
    expect(text).not.toContain("someone else's");
    const failed = body.find((r) => r[header.indexOf("status")] === "failed")!;
    expect([failed[header.indexOf("credits_charged")], failed[header.indexOf("credits_refunded")]]).toEqual(["1", "1"]);
    expect(failed[header.indexOf("key")]).toMatch(/^test \(sk-atl-/);
    // Without a session: to sign-in, no data.
    const anonymous = await fetch(`${server.url}/credits/history.csv`, { redirect: "manual" });
    expect(anonymous.status).toBe(303);
  }, TEST_TIMEOUT_MS);

  test("every new page at 1280×800 and 375×812, light and dark", async () => {
    const requestPath = new URL(page.url()).pathname.startsWith("/credits/requests/") ? new URL(page.url()).pathname : "/credits";
    await shootEverySize("/keys", "03-keys");
    const keyId = (await server.services.store.keys.listForUser(owner.userId)).find((k) => k.name === "ci script v2")!.id;
    await shootEverySize(`/keys/${keyId}`, "04-key-edit");
    await shootEverySize("/usage", "05-usage");
    await shootEverySize(requestPath, "06-request");
    await shootEverySize("/credits", "07-credits");
  }, TEST_TIMEOUT_MS * 2);

  test("in Simplified Chinese: the new pages use the translations", async () => {
    const keyId = (await server.services.store.keys.listForUser(owner.userId)).find((k) => k.name === "ci script v2")!.id;
    const zh = { "accept-language": "zh-CN" };
    const expected: [string, string[]][] = [
      ["/keys", ["积分上限", "有效期至", "已用"]],
      [`/keys/${keyId}`, ["名称和限制", "保存"]],
      ["/usage", ["每日图片", "按模型", "按密钥", "下载 CSV"]],
      ["/credits", ["历史与账目", "以 CSV 下载全部历史"]],
    ];
    for (const [path, parts] of expected) {
      const text = await (await page.request.get(`${server.url}${path}`, { headers: zh })).text();
      for (const part of parts) expect(text).toContain(part);
      for (const english of ["Credit cap", "Images per day", "Name and limits", "Download CSV"]) expect(text).not.toContain(english);
    }
    const { context: ctx, page: p } = await newPage({ width: 1280, height: 800 }, "light");
    try {
      await signIn(p);
      await ctx.setExtraHTTPHeaders(zh);
      await p.goto(`${server.url}/usage`);
      await p.screenshot({ path: join(ARTIFACTS, "08-usage-desktop-light-zh.png"), fullPage: true });
    } finally {
      await ctx.close();
    }
  }, TEST_TIMEOUT_MS);
});

/** A small RFC 4180 reader for the test's own assertions. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') (cell += '"'), i++;
      else if (ch === '"') quoted = false;
      else cell += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ",") row.push(cell), (cell = "");
    else if (ch === "\r" && text[i + 1] === "\n") row.push(cell), rows.push(row), (row = []), (cell = ""), i++;
    else cell += ch;
  }
  return rows;
}

describe("history pages", () => {
  test("Older and Newer follow the history by cursor; a filtered page that stopped at its search bound says so and searches on", async () => {
    // A user of its own, with more chat rows than one search reads (2,000), the oldest one failed.
    const reader = await server.userWithKey({ password: PASSWORD });
    const start = clock() - 3_000_000;
    for (let i = 0; i < 2030; i++) {
      server.services.store.requests.recordChat({ id: `req_pages_${String(i).padStart(4, "0")}`, userId: reader.userId, keyId: null, model: "builtin-chat", status: i === 0 ? "failed" : "succeeded", prompt: `prompt ${i}`, errorMessage: i === 0 ? "the oldest failure" : null }, start + i * 1000);
    }
    const { context: ctx, page: p } = await newPage({ width: 1280, height: 800 }, "light");
    try {
      await signInThroughForm(p, server.url, reader.email, PASSWORD);
      await p.goto(`${server.url}/credits`);
      const prompts = () => p.locator("table.requests td.prompt").allTextContents();
      expect((await prompts()).slice(0, 2)).toEqual(["prompt 2029", "prompt 2028"]);
      expect(await p.locator(".pager").textContent()).toContain("2030 requests");
      await p.locator('.pager a[rel="next"]').click();
      await p.waitForURL(/older=/);
      expect((await prompts()).slice(0, 1)).toEqual(["prompt 2004"]);
      await p.locator('.pager a[rel="prev"]').click();
      await p.waitForURL(/newer=/);
      expect((await prompts()).slice(0, 1)).toEqual(["prompt 2029"]);

      // Failed only: the newest 2,000 hold none; the page says so, and Older finds the one further back.
      await p.goto(`${server.url}/credits?status=failed`);
      expect(await p.getByTestId("history-partial").textContent()).toContain("searched 2,000 requests");
      expect(await prompts()).toEqual([]);
      for (const viewport of [{ width: 1280, height: 800 }, { width: 375, height: 812 }]) {
        await p.setViewportSize(viewport);
        await p.screenshot({ path: join(ARTIFACTS, `history-partial-${viewport.width}.png`), fullPage: true });
        expect(await p.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(viewport.width);
      }
      await p.locator('.pager a[rel="next"]').click();
      await p.waitForURL(/older=/);
      expect(await prompts()).toEqual(["prompt 0"]);
      expect(await p.locator("table.requests").textContent()).toContain("the oldest failure");
      expect(await p.getByTestId("history-partial").count()).toBe(0);
      expect(await p.locator('.pager a[rel="next"]').count()).toBe(0);
      expect(await p.locator(".pager").textContent()).toContain("1 request");
    } finally {
      await ctx.close();
    }
  }, TEST_TIMEOUT_MS);
});

describe("CSV export, one at a time", () => {
  test("a second export of the same history while one streams is 429; the slot is freed when the first is finished or abandoned", async () => {
    const exporter = await server.userWithKey({ password: PASSWORD });
    // About 10 MB of CSV: more than the socket buffers hold, so an export whose client stops reading stays open.
    const ROWS = 5000;
    for (let i = 0; i < ROWS; i++) {
      server.services.store.requests.recordChat({ id: `req_export_${String(i).padStart(4, "0")}`, userId: exporter.userId, keyId: null, model: "builtin-chat", status: "succeeded", prompt: `export ${i} ${"x".repeat(2000)}` }, clock() - 2_000_000 + i);
    }
    const cookieOf = async (email: string) =>
      (await fetch(`${server.url}/signin`, {
        method: "POST", redirect: "manual",
        headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ email, password: PASSWORD }),
      })).headers.get("set-cookie")!.split(";")[0]!;
    const cookie = await cookieOf(exporter.email);
    const csv = (c = cookie) => fetch(`${server.url}/credits/history.csv`, { headers: { cookie: c } });

    // The first export, from a client that reads its first bytes and then stops reading.
    const { hostname, port } = new URL(server.url);
    const stalled = connect({ host: hostname, port: Number(port) });
    const firstBytes = new Promise<string>((resolve) => stalled.once("data", (d: Buffer) => (stalled.pause(), resolve(d.toString("latin1")))));
    stalled.write(`GET /credits/history.csv HTTP/1.1\r\nHost: ${hostname}:${port}\r\nCookie: ${cookie}\r\n\r\n`);
    expect(await firstBytes).toStartWith("HTTP/1.1 200");
    const second = await csv();
    expect(second.status).toBe(429);
    expect(second.headers.get("retry-after")).toBe("5");
    expect(await second.text()).toContain("An export is already running");
    // Another user's export is not held up by this one.
    const others = await csv(await cookieOf(owner.email));
    expect(others.status).toBe(200);
    await others.text();

    // Abandoned: the client goes away mid-stream, and the next export is let through.
    stalled.destroy();
    let next: Response | undefined;
    await until(async () => {
      next = await csv();
      if (next.status === 429) await next.text();
      return next.status === 200;
    }, "the export slot freed after the client went away");
    // Read to the end: every row, and the slot is free again at once.
    expect((await next!.text()).trimEnd().split("\r\n").length).toBe(1 + ROWS);
    const again = await csv();
    expect(again.status).toBe(200);
    expect((await again.text()).trimEnd().split("\r\n").length).toBe(1 + ROWS);
  }, TEST_TIMEOUT_MS);
});
