/**
 * Swagger UI at /docs in a real browser (Debian's chromium) with every request that does not go
 * to our server blocked: it renders the API from /openapi.json, and "Try it out" works for EVERY
 * operation the served document has (so operations added later are covered too): parameters,
 * bodies and files are filled in the page, Execute is pressed, and the live response must be
 * the expected success, or at least a status the document lists, never a client-side failure.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type Locator, type Page } from "playwright-core";
import { launchChromium } from "../support/browser";
import { makePng } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";

const ARTIFACTS = join(import.meta.dir, "../../test-artifacts");

interface Operation {
  operationId: string;
  tags?: string[];
  parameters?: { name: string; in: string }[];
  requestBody?: { content: Record<string, unknown> };
  responses: Record<string, unknown>;
}
type Paths = Record<string, Record<string, Operation>>;

let server: TestServer;
let browser: Browser;
let key: string;
let paths: Paths;
/** Things that exist, for the path and query parameters: a finished task and a signed image link. */
let taskId: string;
let link: { file: string; expires: string; signature: string };

beforeAll(async () => {
  server = await startTestServer();
  const user = await server.userWithKey({ credits: 20 });
  key = user.key;
  paths = ((await (await fetch(`${server.url}/openapi.json`)).json()) as { paths: Paths }).paths;
  // A finished task (an async request) and a url answer's signed link.
  const auth = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  const task = (await (await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { ...auth, prefer: "respond-async" }, body: JSON.stringify({ prompt: "a task", size: "64x64" }) })).json()) as { id: string };
  taskId = task.id;
  for (let i = 0; i < 200; i++) {
    const t = (await (await fetch(`${server.url}/v1/images/tasks/${taskId}`, { headers: auth })).json()) as { status: string };
    if (t.status === "succeeded") break;
    await Bun.sleep(25);
  }
  const answer = (await (await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: auth, body: JSON.stringify({ prompt: "a link", size: "64x64", response_format: "url" }) })).json()) as { data: { url: string }[] };
  const url = new URL(answer.data[0]!.url);
  link = { file: url.pathname.split("/").at(-1)!, expires: url.searchParams.get("expires")!, signature: url.searchParams.get("signature")! };
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
});

/** What each known operation answers when tried with the values below; any other operation must answer a documented status. */
const EXPECTED: Record<string, number> = {
  "GET /healthz": 200,
  "GET /readyz": 200,
  "GET /v1/models": 200,
  "GET /v1/models/{model}": 200,
  "GET /v1/me": 200,
  "GET /v1/usage": 200,
  "POST /v1/chat/completions": 200,
  "POST /v1/images/generations": 200,
  "POST /v1/images/edits": 200,
  "GET /v1/images/tasks": 200,
  "GET /v1/images/tasks/{id}": 200,
  // The task has finished: canceling it is the documented 409 task_not_cancelable.
  "POST /v1/images/tasks/{id}/cancel": 409,
  "GET /files/images/{file}": 200,
};

/** The value typed into a parameter field; undefined leaves it empty (every optional one). */
function parameterValue(name: string, where: string): string | undefined {
  if (where === "path" && name === "model") return "builtin-image";
  if (where === "path" && name === "id") return taskId;
  if (where === "path" && name === "file") return link.file;
  if (where === "query" && name === "expires") return link.expires;
  if (where === "query" && name === "signature") return link.signature;
  return undefined;
}

/** The row of a form field in an operation's request body. */
const bodyField = (op: Locator, name: string) => op.locator(".opblock-section-request-body tr").filter({ has: op.page().locator(".parameter__name", { hasText: new RegExp(`^\\s*${name.replace(/[[\]]/g, "\\$&")}\\s*\\*?`) }) }).first();

async function execute(op: Locator): Promise<{ status: string; body: string }> {
  const responses = op.locator(".live-responses-table");
  await op.locator("button.execute").click();
  const status = responses.locator(".response .response-col_status").first();
  await status.waitFor({ state: "visible", timeout: 60_000 });
  const body = (await responses.locator(".response .response-col_description").first().innerText()).trim();
  return { status: (await status.innerText()).trim(), body };
}

async function authorize(page: Page): Promise<void> {
  await page.locator("button.authorize").first().click();
  await page.locator(".auth-container input").first().fill(key);
  await page.locator(".auth-btn-wrapper button.authorize").click();
  await page.locator(".auth-btn-wrapper button.btn-done").click();
}

describe("Swagger UI in chromium, offline", () => {
  test("Try it out succeeds for every operation of the served document, the multipart edit with a real file", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const blocked: string[] = [];
    const origin = new URL(server.url).origin;
    await context.route("**/*", (route) => {
      const url = route.request().url();
      if (url.startsWith(origin) || url.startsWith("data:") || url.startsWith("blob:")) return route.continue();
      blocked.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    const pageErrors: string[] = [];
    const warnings: string[] = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    const sentEdits: string[] = [];
    page.on("request", (r) => {
      if (r.url().endsWith("/v1/images/edits")) sentEdits.push((r.postDataBuffer() ?? Buffer.alloc(0)).toString("latin1"));
    });
    page.on("console", (m) => {
      if (m.type() === "warning" || m.type() === "error") warnings.push(m.text());
    });

    await page.goto(`${server.url}/docs`);
    await page.locator(".opblock").first().waitFor({ state: "visible", timeout: 30_000 });
    await authorize(page);

    const results: { operation: string; status: string; documented: string[]; body: string }[] = [];
    for (const [path, item] of Object.entries(paths)) {
      for (const [method, operation] of Object.entries(item)) {
        const name = `${method.toUpperCase()} ${path}`;
        const op = page.locator(`#operations-${operation.tags?.[0] ?? "default"}-${operation.operationId}`);
        await op.locator(".opblock-summary").click();
        for (const p of operation.parameters ?? []) {
          const value = parameterValue(p.name, p.in);
          if (value !== undefined) await op.locator(`tr[data-param-name="${p.name}"][data-param-in="${p.in}"] input`).fill(value);
        }
        const documented = Object.keys(operation.responses);
        const content = Object.keys(operation.requestBody?.content ?? {});
        if (content.includes("multipart/form-data")) {
          // The default content type of the edit: fill the file parts and send.
          await bodyField(op, "image").locator('input[type="file"]').setInputFiles({ name: "photo.png", mimeType: "image/png", buffer: Buffer.from(makePng(64, 64)) });
          await bodyField(op, "size").locator('input[type="text"]').fill("64x64");
          const multipart = await execute(op);
          results.push({ operation: `${name} (multipart/form-data)`, status: multipart.status, documented, body: multipart.body.slice(0, 300) });
          if (name === "POST /v1/images/edits") {
            expect({ status: multipart.status, hasImage: multipart.body.includes('"b64_json"'), body: multipart.body.slice(0, 400) }).toMatchObject({ status: "200", hasImage: true });
            // Several files: one more in `image[]`, through its own file picker.
            const list = bodyField(op, "image[]");
            await list.locator("button.json-schema-form-item-add").click();
            await list.locator('input[type="file"]').first().setInputFiles({ name: "guide.png", mimeType: "image/png", buffer: Buffer.from(makePng(64, 64, () => [20, 120, 200, 255])) });
            const two = await execute(op);
            // Both files went as file parts, and no part carries Swagger's placeholder text "string".
            const last = sentEdits.at(-1)!;
            expect(last).toContain('name="image"; filename="photo.png"');
            expect(last).toContain('name="image[]"; filename="guide.png"');
            expect(last).not.toMatch(/\r\n\r\nstring\r\n/);
            expect({ status: two.status, hasImage: two.body.includes('"b64_json"'), body: two.body.slice(0, 400) }).toMatchObject({ status: "200", hasImage: true });
            // What a person sees at 1280×800: the form with the two files, then the live answer.
            await bodyField(op, "image").scrollIntoViewIfNeeded();
            await page.screenshot({ path: join(ARTIFACTS, "docs-edits-form-1280.png") });
            await op.locator(".live-responses-table").first().scrollIntoViewIfNeeded();
            await page.screenshot({ path: join(ARTIFACTS, "docs-edits-response-1280.png") });
          }
          if (content.includes("application/json")) {
            await op.locator(".opblock-section-request-body select").first().selectOption("application/json");
          }
        }
        if (!content.includes("multipart/form-data") || content.includes("application/json")) {
          const { status, body } = await execute(op);
          results.push({ operation: name, status, documented, body: body.slice(0, 300) });
        }
        await op.locator(".opblock-summary").click();
      }
    }

    for (const r of results) {
      // A client-side failure ("Failed to fetch", a CORS or network error) shows no numeric status.
      expect({ operation: r.operation, numeric: /^\d{3}$/.test(r.status) }).toEqual({ operation: r.operation, numeric: true });
      expect({ operation: r.operation, documented: r.documented.includes(r.status) }).toEqual({ operation: r.operation, documented: true });
      const expected = EXPECTED[r.operation.replace(/ \(.*\)$/, "")];
      if (expected !== undefined) expect({ operation: r.operation, status: r.status, body: r.body }).toMatchObject({ operation: r.operation, status: String(expected) });
    }
    expect(results.map((r) => r.operation)).toEqual(expect.arrayContaining(["POST /v1/images/edits (multipart/form-data)", "POST /v1/images/edits", "GET /v1/models"]));
    expect(results.length).toBeGreaterThanOrEqual(Object.values(paths).reduce((n, item) => n + Object.keys(item).length, 0));

    expect(blocked).toEqual([]);
    expect(pageErrors).toEqual([]);
    // Swagger UI understands every schema (a file part it could not render warned "Could not find component").
    expect(warnings.filter((w) => w.includes("Could not find component"))).toEqual([]);
    await context.close();
  }, 300_000);
});

mkdirSync(ARTIFACTS, { recursive: true });
