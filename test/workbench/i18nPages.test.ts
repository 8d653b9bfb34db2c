/**
 * "No page shows an untranslated key": every HTML page the workbench serves (signed out, as a
 * user, as an admin, and the answers to forms) is rendered in Chinese by a real listening server,
 * with real data in it (a key, an image, a chat, a code batch, an upstream), and checked for
 *   - catalog key names (a message that was never looked up),
 *   - English catalog text where the Chinese one differs (a message looked up in the wrong language),
 *   - runs of three or more English words (a sentence that never went into the catalog).
 * The pages come from the app's own route table, so a page added later is checked too.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { EN, ZH, type MessageKey } from "../../src/workbench/i18n/catalog";
import { startTestServer, type TestServer } from "../support/server";

const ZH_HEADERS = { "accept-language": "zh-CN,zh;q=0.9,en;q=0.5" };
const PASSWORD = "long enough password";
/** Paths that answer something other than a workbench page (API, files, JSON, images, docs). */
const NOT_PAGES = /^\/(v1|assets|admin\/api|files|session$|gallery\/thumb|docs|openapi|healthz|metrics)/;

let server: TestServer;
let admin = "";
let user = "";
let imageId = "";

const decode = (s: string) =>
  s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&#123;/g, "{").replace(/&#125;/g, "}").replace(/&amp;/g, "&");

/** What a person reads or hears: text nodes and the attributes shown or spoken; not code, scripts or user text boxes. */
function visibleTexts(page: string): string[] {
  const body = page.replace(/<script[\s\S]*?<\/script>/g, " ").replace(/<code>[\s\S]*?<\/code>/g, " ").replace(/<textarea[^>]*>[\s\S]*?<\/textarea>/g, " ");
  const texts: string[] = [];
  for (const m of body.matchAll(/\s(?:title|placeholder|aria-label|alt|data-confirm)="([^"]*)"/g)) texts.push(decode(m[1]!));
  for (const m of body.replace(/<[^>]*>/g, "\n").split("\n")) texts.push(decode(m));
  return texts.map((t) => t.trim()).filter((t) => t.length > 0);
}

const differing = (Object.keys(EN) as MessageKey[]).filter((k) => ZH[k] !== EN[k] && !k.startsWith("client."));
/** The English text of each message that Chinese says differently, cut at parameters and markup. */
const englishPieces = differing.flatMap((k) =>
  decode(EN[k])
    .split(/\{\w+\}|<[^>]*>/)
    .map((p) => p.trim().replace(/^[\s(“"'.,:;·—–-]+|[\s)”"'.,:;·—–-]+$/g, ""))
    // Names kept as they are in Chinese too (e.g. "Standard Webhooks") are not English left over.
    .filter((p) => /[A-Za-z]{2}/.test(p) && !decode(ZH[k]).includes(p))
    .map((piece) => ({ key: k, piece })),
);

function untranslated(page: string): string[] {
  const problems: string[] = [];
  const withoutMessages = page.replace(/<script type="application\/json" id="atelier-messages">[\s\S]*?<\/script>/, "");
  for (const k of Object.keys(EN)) if (withoutMessages.includes(k)) problems.push(`key ${k}`);
  const texts = visibleTexts(page);
  const joined = texts.join("\n");
  for (const { key, piece } of englishPieces) {
    // One word (e.g. "image") only as a whole text; a phrase anywhere.
    const found = piece.includes(" ") ? joined.includes(piece) : texts.includes(piece);
    if (found) problems.push(`English of ${key}: "${piece}"`);
  }
  for (const t of texts) {
    const run = /\b[A-Za-z]{2,}(?:[ ,']+[A-Za-z]{2,}){2,}\b/.exec(t);
    if (run) problems.push(`English words: "${run[0]}" in "${t.slice(0, 120)}"`);
  }
  if (!page.includes('<html lang="zh-CN">')) problems.push("<html lang> is not zh-CN");
  return problems;
}

async function get(path: string, cookie = ""): Promise<Response> {
  return fetch(`${server.url}${path}`, { headers: { ...ZH_HEADERS, cookie }, redirect: "manual" });
}

async function post(path: string, fields: Record<string, string>, cookie = ""): Promise<Response> {
  return fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { ...ZH_HEADERS, cookie, origin: server.url, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(fields),
    redirect: "manual",
  });
}

async function signIn(email: string): Promise<string> {
  const res = await post("/signin", { email, password: PASSWORD });
  expect(res.status).toBe(303);
  return res.headers.get("set-cookie")!.split(";")[0]!;
}

async function csrfOf(cookie: string): Promise<string> {
  return /name="csrf-token" content="([^"]+)"/.exec(await (await get("/keys", cookie)).text())![1]!;
}

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
log_requests = false

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
  await server.userWithKey({ email: "boss@example.com", role: "admin", password: PASSWORD, credits: 5 });
  const painter = await server.userWithKey({ email: "painter@example.com", password: PASSWORD, credits: 5 });
  admin = await signIn("boss@example.com");
  user = await signIn("painter@example.com");
  // Real data on the pages: an image (gallery, history), a chat, a key, a webhook endpoint.
  const auth = { authorization: `Bearer ${painter.key}`, "content-type": "application/json" };
  const image = await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: auth, body: JSON.stringify({ model: "builtin-image", prompt: "海边的灯塔", size: "256x256" }) });
  expect(image.status).toBe(200);
  const chat = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: auth, body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "你好" }] }) });
  expect(chat.status).toBe(200);
  const gallery = await (await get("/gallery", user)).text();
  imageId = /data-image-id="(img_[A-Za-z0-9]+)"/.exec(gallery)![1]!;
}, 60_000);

afterAll(async () => {
  await server?.close();
});

describe("every page in Chinese", () => {
  test("every GET page of the route table, as an admin and as a user", async () => {
    const paths = createApp(server.services)
      .routes.filter((r) => r.method === "GET" && !NOT_PAGES.test(r.path) && r.path !== "/" && r.path !== "/*")
      .map((r) => r.path);
    const painterId = (await server.services.store.users.byEmail("painter@example.com"))!.id;
    const { store } = server.services;
    const keyId = (await store.keys.listForUser(painterId))[0]!.id;
    const requestId = (await store.requests.list({ userId: painterId, limit: 1, offset: 0 }))[0]!.id;
    const params: Record<string, string> = {
      "/gallery/:id": `/gallery/${imageId}`,
      "/admin/users/:id": `/admin/users/${painterId}`,
      "/keys/:id": `/keys/${keyId}`,
      "/credits/requests/:id": `/credits/requests/${requestId}`,
    };
    const unknown = paths.filter((p) => p.includes(":") && !params[p]);
    // A new page with a parameter: give it a real value above so it is checked too.
    expect(unknown).toEqual([]);
    expect(paths.length).toBeGreaterThanOrEqual(12);
    const checked: string[] = [];
    for (const route of paths) {
      const path = params[route] ?? route;
      for (const [who, cookie] of [["admin", admin], ["user", user]] as const) {
        const res = await get(path, cookie);
        if (!(res.headers.get("content-type") ?? "").startsWith("text/html")) continue;
        expect([path, who, res.status < 500]).toEqual([path, who, true]);
        expect([path, who, untranslated(await res.text())]).toEqual([path, who, []]);
        checked.push(`${who} ${path}`);
      }
    }
    for (const must of [`user /keys/${keyId}`, `user /credits/requests/${requestId}`, "admin /admin", "admin /admin/upstreams", "admin /admin/models", "user /playground", "user /gallery", `user /gallery/${imageId}`, "user /credits", "user /keys", "user /webhooks", "user /admin"]) {
      expect(checked).toContain(must);
    }
  }, 120_000);

  test("signed out: sign-in, sign-up, setup, and the refusals", async () => {
    for (const path of ["/signin", "/signin?signed_out=1", "/signup", "/setup"]) {
      const res = await get(path);
      expect([path, untranslated(await res.text())]).toEqual([path, []]);
    }
    const wrong = await post("/signin", { email: "boss@example.com", password: "wrong password!" });
    expect(wrong.status).toBe(401);
    expect(untranslated(await wrong.text())).toEqual([]);
    const signedOut = await post("/keys", { name: "x" });
    expect(signedOut.status).toBe(403);
    expect(untranslated(await signedOut.text())).toEqual([]);
  }, 60_000);

  test("the answers to forms: a new key, a refused key name, a new code batch, admin grants, a webhook refusal, a redeemed code", async () => {
    const userCsrf = await csrfOf(user);
    const adminCsrf = await csrfOf(admin);
    const answers: [string, Response][] = [
      ["new key", await post("/keys", { _csrf: userCsrf, name: "笔记本脚本" }, user)],
      ["empty key name", await post("/keys", { _csrf: userCsrf, name: "" }, user)],
      ["no such key", await post("/keys/999/revoke", { _csrf: userCsrf }, user)],
      ["codes", await post("/admin/codes", { _csrf: adminCsrf, name: "春季", credits: "2", count: "2", expires_days: "" }, admin)],
      ["bad grant", await post("/admin/users/1/credits", { _csrf: adminCsrf, amount: "0", op: "grant" }, admin)],
      ["no webhook url", await post("/webhooks/endpoint", { _csrf: userCsrf, url: "" }, user)],
      ["new secret", await post("/webhooks/secret", { _csrf: userCsrf }, user)],
      // Rotated: the previous secret's overlap, the two rotate buttons and their confirms.
      ["rotated secret", await post("/webhooks/secret", { _csrf: userCsrf }, user)],
      ["rotated without overlap", await post("/webhooks/secret", { _csrf: userCsrf, overlap: "none" }, user)],
      ["rotated again", await post("/webhooks/secret", { _csrf: userCsrf }, user)],
      ["bad code", await post("/credits/redeem", { _csrf: userCsrf, code: "nope" }, user)],
      ["wrong code", await post("/credits/redeem", { _csrf: userCsrf, code: "ABCD-EFGH-JKLM-NPQR" }, user)],
      ["no csrf", await post("/keys", { name: "x" }, user)],
    ];
    for (const [what, res] of answers) {
      expect([what, res.status < 500]).toEqual([what, true]);
      expect([what, untranslated(await res.text())]).toEqual([what, []]);
    }
    for (const done of ["/admin?done=granted", "/keys?revoked=1", "/gallery?done=deleted", "/webhooks?done=sent", "/admin/upstreams?enabled=1", "/credits?redeemed=2"]) {
      const cookie = done.startsWith("/admin") ? admin : user;
      const res = await get(done, cookie);
      expect([done, untranslated(await res.text())]).toEqual([done, []]);
    }
  }, 60_000);

  test("refusals that core explains (webhook URL, code batch) are worded in Chinese", async () => {
    const userCsrf = await csrfOf(user);
    const adminCsrf = await csrfOf(admin);
    const refusals: [string, Response, string][] = [
      ["private webhook url", await post("/webhooks/endpoint", { _csrf: userCsrf, url: "http://127.0.0.1:9/hook" }, user), "Webhook 只能发往公网地址：127.0.0.1 不是公网地址（loopback）。"],
      ["webhook host resolving to loopback", await post("/webhooks/endpoint", { _csrf: userCsrf, url: "http://localhost:9/hook" }, user), "Webhook 只能发往公网地址：localhost 解析到"],
      ["webhook url scheme", await post("/webhooks/endpoint", { _csrf: userCsrf, url: "ftp://example.com/hook" }, user), "Webhook URL 必须以 http:// 或 https:// 开头。"],
      ["webhook url not absolute", await post("/webhooks/endpoint", { _csrf: userCsrf, url: "example.com/hook" }, user), "Webhook URL 必须是以 http:// 或 https:// 开头的完整 URL。"],
      ["webhook url with password", await post("/webhooks/endpoint", { _csrf: userCsrf, url: "https://me:pw@example.com/hook" }, user), "Webhook URL 不能包含用户名或密码。"],
      ["test event without endpoint", await post("/webhooks/test", { _csrf: userCsrf }, user), "请先设置端点 URL。"],
      ["code batch count", await post("/admin/codes", { _csrf: adminCsrf, name: "春季", credits: "2", count: "0", expires_days: "" }, admin), "每个批次包含 1 到 10000 个兑换码。"],
      ["code batch value", await post("/admin/codes", { _csrf: adminCsrf, name: "春季", credits: "abc", count: "2", expires_days: "" }, admin), "每个兑换码的额度须为 1 到 1000000000 之间的整数。"],
      ["code batch expiry", await post("/admin/codes", { _csrf: adminCsrf, name: "春季", credits: "2", count: "2", expires_days: "99999" }, admin), "有效期须为 1 到 3650 之间的整数天，或留空表示永不过期。"],
      ["code batch name", await post("/admin/codes", { _csrf: adminCsrf, name: " ", credits: "2", count: "2", expires_days: "" }, admin), "批次名称须为 1 到 100 个字符。"],
    ];
    for (const [what, res, sentence] of refusals) {
      const text = await res.text();
      expect([what, res.status]).toEqual([what, 400]);
      expect([what, decode(text).includes(sentence)]).toEqual([what, true]);
      expect([what, untranslated(text)]).toEqual([what, []]);
    }
  }, 60_000);
});
