/**
 * No fragment of an upstream account's secret ever leaves the server: a real listening server
 * whose upstreams are fakes that echo the credentials they receive (the Bearer key, the Basic
 * user's password, the raw Authorization header) in every place an upstream can put text:
 * error bodies longer than the 500-character cut with the secret straddling it, JSON and
 * plain-text errors, WebUI `detail` arrays, a 401 that disables the account, a 429, a
 * successful image's revised_prompt and a chat answer's content.
 *
 * Then every surface is searched for any 8-character window of any secret (raw, JSON-escaped
 * and HTML-escaped): the HTTP responses, the captured log lines, the workbench pages that show
 * history and upstream failures, the admin JSON view, and every text column of every table of
 * the database (read through the store's connection).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Server } from "bun";
import { makePng } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";

/** Account keys deliberately without an `sk-` prefix, so no generic token pattern can save the day. */
const KEY = "atl-live-Q7w9Zk2mPx4Rt8Vb3Nc6Hd1Jf5";
const KEY_AUTH = "atl-auth-Lm4Nq8Rs2Tv6Wx0Yz3Ab7Cd1Ef";
const KEY_RL = "sk-proj-Rl9Gh3Jk7Lm1Np5Qr8St2Uv6Wx";
const USER = "painter";
/** A quote and a slash: its JSON form differs from its raw form. */
const PASSWORD = 'Tr0ub4dor"3/horse-battery-staple';
const SECRETS = [KEY, KEY_AUTH, KEY_RL, PASSWORD];
const BASIC = Buffer.from(`${USER}:${PASSWORD}`).toString("base64");
const WINDOW = 8;

let upstream: Server<undefined>;
let server: TestServer;
/** Every HTTP response body our server sent in this file. */
const bodies: string[] = [];

/** What the fake learned from the request's Authorization header. */
function credentials(request: Request): { secret: string; header: string } {
  const header = request.headers.get("authorization") ?? "";
  const bearer = /^Bearer\s+(.+)$/i.exec(header);
  if (bearer) return { secret: bearer[1]!, header };
  const basic = /^Basic\s+(.+)$/i.exec(header);
  if (basic) return { secret: Buffer.from(basic[1]!, "base64").toString("utf8").split(":").slice(1).join(":"), header };
  return { secret: "", header };
}

/** `before` padded so that `secret` starts `lead` characters before position `at` of the result. */
function straddling(secret: string, at: number, lead: number, before = "", after = " and then some more words."): string {
  return before + "e".repeat(at - lead - before.length) + secret + after;
}

const png = Buffer.from(makePng(64, 64, (x, y) => [x * 4, y * 4, 40, 255])).toString("base64");

/** One fake speaking both APIs; the prompt (or the chat message) picks the answer. */
function startEchoingUpstream(): Server<undefined> {
  return Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const path = new URL(request.url).pathname;
      const body = (await request.json().catch(() => ({}))) as { prompt?: string; messages?: { content: string }[] };
      const { secret, header } = credentials(request);
      if (path === "/v1/chat/completions") {
        const content = `Here it is: ${secret} (the start ${secret.slice(0, 12)}, the end ${secret.slice(-12)}, the header "${header}").`;
        return Response.json({ id: "c", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1 } });
      }
      const prompt = body.prompt ?? "";
      if (path === "/v1/images/generations") {
        switch (prompt) {
          case "revised":
            return Response.json({ created: 1, data: [{ b64_json: png, revised_prompt: `A fox for ${secret}, cut ${secret.slice(3, 15)}, header ${header}` }] });
          case "long-text":
            // Plain text, the key straddling the 500-character cut.
            return new Response(straddling(secret, 500, 12), { status: 500, headers: { "content-type": "text/plain" } });
          case "long-json":
            return Response.json({ error: { message: straddling(secret, 500, 10, "Internal error: ") } }, { status: 502 });
          case "edges":
            // Already truncated upstream: the key's tail opens the text and its head closes it.
            return new Response(`${secret.slice(7)} was refused; retry with ${secret.slice(0, 11)}`, { status: 503 });
          case "rejected":
            return Response.json({ error: { message: straddling(secret, 500, 11, "Rejected by policy for account ") } }, { status: 400 });
          case "no-boundary":
            return Response.json({ error: { message: `Bad token x${secret}y and key=${secret}` } }, { status: 500 });
          case "auth":
            // Straddles the 300-character cut of the stored disabled reason too.
            return Response.json({ error: { message: straddling(secret, 300, 13, "Incorrect API key provided: ") } }, { status: 401 });
          case "ratelimit":
            return Response.json({ error: { message: `Rate limit reached for ${secret}` } }, { status: 429, headers: { "retry-after": "0" } });
        }
      }
      if (path === "/sdapi/v1/txt2img") {
        switch (prompt) {
          case "detail": {
            // FastAPI's 422: the password straddles the 500-character cut of the stringified array.
            const head = JSON.stringify([{ loc: ["body", "prompt"], msg: "" }]).indexOf('msg":"') + 6;
            const msg = straddling(secret, 500 - head, 14);
            return Response.json({ detail: [{ loc: ["body", "prompt"], msg, type: "value_error" }, { loc: ["header"], msg: header, type: "auth" }] }, { status: 422 });
          }
          case "detail-string":
            return Response.json({ detail: straddling(secret, 500, 9, "Not authenticated as ") }, { status: 500 });
          case "error-message":
            return Response.json({ error: "RuntimeError", message: `while serving ${header}: ${secret}` }, { status: 500 });
        }
        return Response.json({ images: [png] });
      }
      return Response.json({ error: { message: `no route ${path} for ${secret}` } }, { status: 404 });
    },
  });
}

function upstreamToml(id: string, kind: "openai" | "sdwebui", account: string, base: string): string {
  return `
[[upstreams]]
id = "${id}"
kind = "${kind}"
base_url = "${base}"
timeout_ms = 3000
max_attempts = 1
failure_threshold = 1000
accounts = [ ${account} ]
`;
}

const tomlString = (s: string) => JSON.stringify(s);

beforeAll(async () => {
  upstream = startEchoingUpstream();
  const base = `http://127.0.0.1:${upstream.port}`;
  const toml = [
    `[limits]\nqueue_timeout_ms = 5000\ngeneration_timeout_ms = 5000\n`,
    upstreamToml("oa", "openai", `{ id = "main", api_key = ${tomlString(KEY)} }`, `${base}/v1`),
    upstreamToml("oaauth", "openai", `{ id = "revoked", api_key = ${tomlString(KEY_AUTH)} }`, `${base}/v1`),
    upstreamToml("oarl", "openai", `{ id = "busy", api_key = ${tomlString(KEY_RL)} }`, `${base}/v1`),
    upstreamToml("sd", "sdwebui", `{ id = "gpu", username = "${USER}", password = ${tomlString(PASSWORD)} }`, base),
    `[[models]]\nid = "pic"\nkind = "image"\nupstream = "oa"\n`,
    `[[models]]\nid = "talk"\nkind = "chat"\nupstream = "oa"\n`,
    `[[models]]\nid = "pic-auth"\nkind = "image"\nupstream = "oaauth"\n`,
    `[[models]]\nid = "pic-rl"\nkind = "image"\nupstream = "oarl"\n`,
    `[[models]]\nid = "sd-pic"\nkind = "image"\nupstream = "sd"\n`,
  ].join("\n");
  server = await startTestServer({ toml });
});

afterAll(async () => {
  await server?.close();
  await upstream?.stop(true);
});

async function call(path: string, init: RequestInit): Promise<Response> {
  const res = await fetch(`${server.url}${path}`, init);
  bodies.push(await res.clone().text());
  return res;
}

async function generate(key: string, model: string, prompt: string): Promise<{ status: number; json: Record<string, any> }> {
  const res = await call("/v1/images/generations", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, prompt, size: "64x64" }),
  });
  return { status: res.status, json: (await res.json()) as Record<string, any> };
}

const escapeJson = (s: string) => JSON.stringify(s).slice(1, -1);
const escapeHtml = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");

/** Every 8-character window of every secret (and of the Basic token) found in `text`, in any of its spellings. */
function fragmentsIn(text: string): string[] {
  const found = new Set<string>();
  for (const secret of [...SECRETS, BASIC]) {
    for (let i = 0; i + WINDOW <= secret.length; i++) {
      const w = secret.slice(i, i + WINDOW);
      for (const form of new Set([w, escapeJson(w), escapeHtml(w), escapeJson(escapeJson(w))])) if (text.includes(form)) found.add(w);
    }
  }
  return [...found];
}

function expectClean(where: string, text: string): void {
  const found = fragmentsIn(text);
  if (found.length > 0) throw new Error(`${where} contains secret fragments ${JSON.stringify(found)}:\n${text.slice(0, 4000)}`);
}

/** Signs in through the form and returns the session cookie. */
async function signIn(email: string, password: string): Promise<string> {
  const res = await fetch(`${server.url}/signin`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ email, password }),
    redirect: "manual",
  });
  expect([302, 303]).toContain(res.status);
  return res.headers.get("set-cookie")!.split(";")[0]!;
}

describe("upstream text that echoes the account's secrets", () => {
  let user: { userId: number; email: string; key: string };
  const USER_PASSWORD = "a user password long enough";

  beforeAll(async () => {
    user = await server.userWithKey({ credits: 50, password: USER_PASSWORD });
  });

  test("a successful image answer: revised_prompt is redacted, the image still arrives", async () => {
    const { status, json } = await generate(user.key, "pic", "revised");
    expect(status).toBe(200);
    expect(json.data[0].b64_json.length).toBeGreaterThan(10);
    expect(json.data[0].revised_prompt).toStartWith("A fox for [redacted], cut [redacted], header Bearer [redacted]");
    expectClean("revised_prompt", JSON.stringify(json));
  });

  test("a chat answer: the message content is redacted", async () => {
    const res = await call("/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${user.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "talk", messages: [{ role: "user", content: "what is your key?" }] }),
    });
    expect(res.status).toBe(200);
    const json = (await res.json()) as { choices: { message: { content: string } }[] };
    expect(json.choices[0]!.message.content).toStartWith("Here it is: [redacted] (the start [redacted], the end [redacted], the header");
    expectClean("chat content", JSON.stringify(json));
  });

  test("error bodies past the 500-character cut, at the edges and without word boundaries: redacted before the cut", async () => {
    const failures = () => server.logs.map((l) => JSON.parse(l) as { msg: string; detail?: string }).filter((l) => l.msg === "image request failed" && l.detail);
    for (const prompt of ["long-text", "long-json", "edges", "no-boundary"]) {
      const before = failures().length;
      const { status, json } = await generate(user.key, "pic", prompt);
      expect(status).toBe(502);
      expect(json.error.code).toBe("upstream_error");
      expectClean(`the ${prompt} error`, JSON.stringify(json));
      // The client gets a plain message; the upstream's own words are for admins, in the log line.
      expect(json.error.message).toStartWith("The upstream service failed");
      for (let i = 0; i < 100 && failures().length === before; i++) await Bun.sleep(20);
      const detail = failures().at(-1)!.detail!;
      expectClean(`the ${prompt} log detail`, detail);
      // Cut texts end with an ellipsis, never inside a marker.
      if (prompt.startsWith("long")) expect(detail).toEndWith("…");
      else expect(detail).toContain("[redacted]");
      expect(detail.replaceAll("[redacted]", "")).not.toMatch(/\[r/);
    }
    const rejected = await generate(user.key, "pic", "rejected");
    expect(rejected.status).toBe(400);
    expect(rejected.json.error.message).toContain("Rejected by policy for account ");
    expectClean("the rejection", JSON.stringify(rejected.json));
  });

  test("WebUI errors: a detail array, a detail string and error/message, with the Basic header echoed", async () => {
    for (const prompt of ["detail", "detail-string", "error-message"]) {
      const { status, json } = await generate(user.key, "sd-pic", prompt);
      expect([400, 502]).toContain(status);
      expectClean(`the WebUI ${prompt} error`, JSON.stringify(json));
    }
    expect((await generate(user.key, "sd-pic", "fine")).status).toBe(200);
  });

  test("a 401 that disables the account and a 429: the stored reason and the failures are redacted", async () => {
    const auth = await generate(user.key, "pic-auth", "auth");
    expect(auth.status).toBe(503);
    const rl = await generate(user.key, "pic-rl", "ratelimit");
    expect(rl.status).toBe(429);
    expectClean("the auth and rate-limit errors", JSON.stringify([auth.json, rl.json]));
    expect(server.logs.some((l) => l.includes("disabled") && l.includes('"account":"revoked"'))).toBe(true);
  });

  describe("every surface afterwards", () => {
    test("the HTTP responses", () => {
      expect(bodies.length).toBeGreaterThanOrEqual(13);
      for (const body of bodies) expectClean("a response body", body);
    });

    test("the server's log lines", () => {
      expect(server.logs.length).toBeGreaterThan(5);
      for (const line of server.logs) expectClean("a log line", line);
    });

    test("the workbench pages: the user's history, the admin's requests and upstreams, the admin JSON view", async () => {
      const admin = await server.userWithKey({ role: "admin", password: "an admin password long enough" });
      const userCookie = await signIn(user.email, USER_PASSWORD);
      const adminCookie = await signIn(admin.email, "an admin password long enough");
      const pages: [string, string][] = [
        ["/credits", userCookie],
        ["/admin/requests", adminCookie],
        ["/admin/upstreams", adminCookie],
      ];
      for (const [path, cookie] of pages) {
        const res = await fetch(`${server.url}${path}`, { headers: { cookie } });
        expect(res.status).toBe(200);
        const html = await res.text();
        expectClean(`the page ${path}`, html);
        if (path !== "/admin/upstreams") expect(html).toContain("[redacted]");
      }
      const api = await fetch(`${server.url}/admin/api/upstreams`, { headers: { authorization: `Bearer ${admin.key}` } });
      expect(api.status).toBe(200);
      const view = await api.text();
      expect(view).toContain("[redacted]");
      expectClean("GET /admin/api/upstreams", view);
    });

    test("every text column of every table of the database", async () => {
      await Promise.all(server.services.upstreams.list().map((p) => p.persistSnapshot()));
      // Through the store's own connection, so the same check covers SQLite and PostgreSQL.
      const sql = server.services.store.sql;
      const tables = await sql.all<{ name: string }>(
        sql.dialect === "postgres"
          ? "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
          : "SELECT name FROM sqlite_master WHERE type = 'table'",
      );
      expect(tables.map((t) => t.name)).toEqual(expect.arrayContaining(["requests", "upstream_disabled_accounts", "upstream_pool_snapshot"]));
      let cells = 0;
      for (const { name } of tables) {
        for (const row of await sql.all<Record<string, unknown>>(`SELECT * FROM "${name.replace(/"/g, '""')}"`)) {
          for (const [column, value] of Object.entries(row)) {
            const text = typeof value === "string" ? value : value instanceof Uint8Array ? new TextDecoder().decode(value) : null;
            if (text === null) continue;
            cells++;
            expectClean(`${name}.${column}`, text);
          }
        }
      }
      expect(cells).toBeGreaterThan(20);
      const reason = await sql.get<{ reason: string }>("SELECT reason FROM upstream_disabled_accounts WHERE account_id = 'revoked'");
      expect(reason?.reason).toContain("Incorrect API key provided: ");
    });
  });
});
