/**
 * U+0000 in what clients and upstreams send, through a real listening server (on the scaled pass,
 * PostgreSQL, which refuses it in text). What holds it is stored with U+FFFD in its place on
 * either backend: a prompt is answered and charged as any other, a refund quoting an upstream's
 * words lands, one client's chat never costs the others their history; a task id, a cursor or a
 * history filter holding it answers as an unknown one does (404, an empty page), never 500.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { startTestServer, type TestServer } from "../support/server";

const NUL = "\u0000";
const REPLACEMENT = "\uFFFD";
const PASSWORD = "long enough password";

let server: TestServer;
let upstream: ReturnType<typeof Bun.serve>;

beforeAll(async () => {
  // As OpenAI answers a value it does not take: "Invalid value: '<what you sent>'. Supported values are: …".
  upstream = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const { style } = (await req.json()) as { style?: string };
      return Response.json({ error: { message: `Invalid value: '${style}'. Supported values are: 'vivid' and 'natural'.`, type: "invalid_request_error", param: "style", code: "invalid_value" } }, { status: 400 });
    },
  });
  server = await startTestServer({
    toml: `
[[upstreams]]
id = "oa"
kind = "openai"
base_url = "http://127.0.0.1:${upstream.port}/v1"
accounts = [ { id = "a", api_key = "sk-test-0123456789abcdef" } ]

[[models]]
id = "picky"
kind = "image"
upstream = "oa"
upstream_model = "gpt-image-1"
`,
    config: (c) => void (c.server.log_requests = false),
  });
});
afterAll(async () => {
  await server?.close();
  upstream?.stop(true);
});

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
const get = (key: string, path: string, init: RequestInit = {}) => fetch(`${server.url}${path}`, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });
const generate = (key: string, body: unknown, headers: Record<string, string> = {}) =>
  get(key, "/v1/images/generations", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
const history = (userId: number) => server.services.store.requests.list({ userId });

test("a prompt holding U+0000 is answered and charged as any other (with an Idempotency-Key too: its repeat gets the same answer); the history shows U+FFFD", async () => {
  const u = await server.userWithKey({ credits: 5 });
  const image = await client(u.key).images.generate({ model: "builtin-image", prompt: `a${NUL}b`, size: "64x64" as "256x256" });
  expect(image.data?.[0]?.b64_json).toBeString();
  expect(await server.balance(u.userId)).toBe(4);

  const first = await generate(u.key, { prompt: `x${NUL}`, size: "64x64" }, { "idempotency-key": "nul-prompt" });
  expect(first.status).toBe(200);
  const again = await generate(u.key, { prompt: `x${NUL}`, size: "64x64" }, { "idempotency-key": "nul-prompt" });
  expect(again.status).toBe(200);
  expect((await again.json()).id).toBe((await first.json()).id);
  expect(await server.balance(u.userId)).toBe(3);
  expect((await history(u.userId)).map((r) => r.prompt).sort()).toEqual([`a${REPLACEMENT}b`, `x${REPLACEMENT}`]);
});

test("a task id or a cursor holding U+0000 answers as an unknown one does: 404, and the same empty page", async () => {
  const u = await server.userWithKey({ credits: 0 });
  const unknown = await get(u.key, "/v1/images/tasks/req_unknown");
  expect(unknown.status).toBe(404);
  const unknownBody = (await unknown.json()) as { error: { code: string } };
  for (const [path, init] of [["/v1/images/tasks/req_%00", {}], ["/v1/images/tasks/req_%00/cancel", { method: "POST" }]] as const) {
    const res = await get(u.key, path, init);
    expect(res.status).toBe(404);
    expect((await res.json()).error.code).toBe(unknownBody.error.code);
  }
  const page = await get(u.key, "/v1/images/tasks?after=%00");
  expect(page.status).toBe(200);
  expect(await page.json()).toEqual(await (await get(u.key, "/v1/images/tasks?after=req_unknown")).json());
});

test("one client's chat holding U+0000 never costs the others their history", async () => {
  const [victim, other] = [await server.userWithKey({ credits: 0 }), await server.userWithKey({ credits: 0 })];
  const chat = (key: string, content: string) => client(key).chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content }] });
  // Together, so the rows share a batch.
  await Promise.all([...Array.from({ length: 5 }, (_, i) => chat(victim.key, `hello ${i}`)), chat(other.key, `x${NUL}y`)]);
  expect(await server.services.store.requests.flushChats()).toBe(true);
  expect((await history(victim.userId)).length).toBe(5);
  expect((await history(other.userId)).map((r) => r.prompt)).toEqual([`x${REPLACEMENT}y`]);
  expect(server.logs.filter((l) => l.includes("chat history rows could not be written"))).toEqual([]);
});

test("an upstream's 400 quoting back a value holding U+0000: the client gets the 400 and the credit back; nothing stays pending", async () => {
  const u = await server.userWithKey({ credits: 3 });
  const res = await generate(u.key, { model: "picky", prompt: "a cat", style: `bo${NUL}gus` });
  expect(res.status).toBe(400);
  expect((await res.json()).error.code).toBe("upstream_rejected");
  expect(await server.balance(u.userId)).toBe(3);
  const [row] = await history(u.userId);
  expect(row).toMatchObject({ status: "failed", credits_refunded: 1 });
  expect(row!.error_message).toContain(`bo${REPLACEMENT}gus`);
  expect(server.logs.filter((l) => l.includes("could not record"))).toEqual([]);
});

test("the workbench's history filters and cursors holding U+0000 answer a page, never 500", async () => {
  const admin = await server.userWithKey({ role: "admin", password: PASSWORD });
  const signIn = await fetch(`${server.url}/signin`, {
    method: "POST",
    redirect: "manual",
    headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ email: admin.email, password: PASSWORD }),
  });
  expect(signIn.status).toBe(303);
  const cookie = signIn.headers.get("set-cookie")!.split(";")[0]!;
  for (const path of ["/credits?model=a%00b", "/credits?older=1700000000000.req_%00", "/credits?newer=1.%00", "/admin/requests?model=%00&older=1700000000000.%00", "/admin/requests?id=req_%00", "/admin/requests?user=a%00%40b", "/admin/requests?key=sk-%00"]) {
    const res = await fetch(`${server.url}${path}`, { headers: { cookie } });
    expect({ path, status: res.status }).toEqual({ path, status: 200 });
  }
});
