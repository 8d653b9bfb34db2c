/**
 * Issue 16: an upstream failure's details (the transport error, which upstream and account, the
 * upstream's own words) are for admins. A real server whose upstreams are a port that refuses
 * connections and a fake that answers 500 with a body quoting the account's key: the history row
 * keeps the redacted detail (written with the failure), admin pages show it, and the user's
 * pages, the user's CSV export and the /v1 answers never do.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Server } from "bun";
import OpenAI from "openai";
import { startTestServer, type TestServer } from "../support/server";

/** Account keys without an `sk-` prefix: only the configured-secret redaction can remove them. */
const KEY = "atl-live-Dz8Kq2Wm5Xr9Tb4Nv7Hc3Jg6";
const CHAT_KEY = "atl-chat-Pf3Lx8Qn1Rs6Vw2Yz9Ab4Ce7";
const SECRETS = [KEY, CHAT_KEY];
const USER_PASSWORD = "a user password long enough";
const ADMIN_PASSWORD = "an admin password long enough";

let failing: Server<undefined>;
let refusedPort: number;
let server: TestServer;

/** Answers every call 500 with the Bearer key it received, as a leaky upstream might. */
function startLeakyUpstream(): Server<undefined> {
  return Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(request) {
      const key = (request.headers.get("authorization") ?? "").replace(/^Bearer\s+/i, "");
      return Response.json({ error: { message: `internal failure while serving account key ${key}` } }, { status: 500 });
    },
  });
}

/** A loopback port nothing listens on (bound, then closed): every connection is refused. */
function closedPort(): number {
  const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
  const port = s.port!;
  s.stop(true);
  return port;
}

function upstreamToml(id: string, base: string, account: string, key: string): string {
  return `
[[upstreams]]
id = "${id}"
kind = "openai"
base_url = "${base}"
timeout_ms = 3000
max_attempts = 1
failure_threshold = 1000
accounts = [ { id = "${account}", api_key = ${JSON.stringify(key)} } ]
`;
}

beforeAll(async () => {
  failing = startLeakyUpstream();
  refusedPort = closedPort();
  const toml = [
    `[limits]\nqueue_timeout_ms = 5000\ngeneration_timeout_ms = 5000\n`,
    upstreamToml("leaky", `http://127.0.0.1:${failing.port}/v1`, "acct-main", KEY),
    upstreamToml("leakychat", `http://127.0.0.1:${failing.port}/v1`, "acct-chat", CHAT_KEY),
    upstreamToml("down", `http://127.0.0.1:${refusedPort}/v1`, "acct-down", KEY),
    `[[models]]\nid = "pic-500"\nkind = "image"\nupstream = "leaky"\n`,
    `[[models]]\nid = "pic-down"\nkind = "image"\nupstream = "down"\n`,
    `[[models]]\nid = "talk-500"\nkind = "chat"\nupstream = "leakychat"\n`,
  ].join("\n");
  server = await startTestServer({ toml });
});

afterAll(async () => {
  await server?.close();
  await failing?.stop(true);
});

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

async function pageText(path: string, cookie: string): Promise<string> {
  const res = await fetch(`${server.url}${path}`, { headers: { cookie } });
  expect(res.status).toBe(200);
  return await res.text();
}

/** Any 8-character window of a configured key, raw. */
function expectNoSecret(where: string, text: string): void {
  for (const secret of SECRETS) {
    for (let i = 0; i + 8 <= secret.length; i++) {
      if (text.includes(secret.slice(i, i + 8))) throw new Error(`${where} contains a fragment of a secret: ${secret.slice(i, i + 8)}`);
    }
  }
}

/** What no user-facing surface may say: the transport error, the upstreams' and accounts' ids, the upstream's words. */
function expectNoDetail(where: string, text: string): void {
  expectNoSecret(where, text);
  for (const word of ["could not reach the upstream", "internal failure while serving", "acct-main", "acct-down", "acct-chat", "[redacted]", 'data-testid="error-detail"']) {
    if (text.includes(word)) throw new Error(`${where} shows "${word}"`);
  }
}

async function waitFor<T>(get: () => T | undefined | Promise<T | undefined>, what: string): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const v = await get();
    if (v !== undefined) return v;
    await Bun.sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("upstream failure details are for admins", () => {
  let user: { userId: number; email: string; key: string };
  let admin: { userId: number; email: string; key: string };
  const ids: Record<string, string> = {};
  const answers: string[] = [];

  beforeAll(async () => {
    user = await server.userWithKey({ credits: 10, password: USER_PASSWORD });
    admin = await server.userWithKey({ credits: 10, role: "admin", password: ADMIN_PASSWORD });
    const client = new OpenAI({ apiKey: user.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    for (const model of ["pic-500", "pic-down"]) {
      const err = await client.images.generate({ model, prompt: `a ${model} lighthouse`, size: "64x64" as "1024x1024" }).then(
        () => {
          throw new Error(`${model} succeeded`);
        },
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(OpenAI.APIError);
      const apiError = err as InstanceType<typeof OpenAI.APIError>;
      expect([502, 503]).toContain(apiError.status ?? 0);
      ids[model] = apiError.headers!.get("x-request-id")!;
      answers.push(JSON.stringify(apiError.error), apiError.message);
    }
    const chat = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${user.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "talk-500", messages: [{ role: "user", content: "hello there" }] }),
    });
    expect(chat.status).toBe(502);
    answers.push(await chat.text());
    // A chat's history id is its completion id (not the x-request-id); its row is the user's only chat.
    ids["talk-500"] = (await waitFor(async () => (await server.services.store.requests.list({ userId: user.userId, kind: "chat" }))[0], "the chat row")).id;
    // The admin's own failing request, for the admin's own request page.
    const adminClient = new OpenAI({ apiKey: admin.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const adminErr = await adminClient.images.generate({ model: "pic-down", prompt: "an admin's lighthouse", size: "64x64" as "1024x1024" }).catch((e: unknown) => e as InstanceType<typeof OpenAI.APIError>);
    ids.admin = (adminErr as InstanceType<typeof OpenAI.APIError>).headers!.get("x-request-id")!;
  });

  test("the /v1 answers are plain: no transport error, upstream, account or upstream words", () => {
    for (const model of ["pic-500", "pic-down"]) expect(ids[model]).toMatch(/^req_/);
    expect(answers).toHaveLength(5);
    for (const a of answers) expectNoDetail("a /v1 answer", a);
    expect(answers[0]).toContain("upstream_error");
    expect(answers.at(-1)).toContain("upstream_error");
  });

  test("each history row keeps the redacted, bounded detail, written with its failure and refund", async () => {
    const { store } = server.services;
    const row = async (id: string) => (await store.requests.get(id)) ?? undefined;
    const refused = await waitFor(async () => ((await row(ids["pic-down"]!))?.status === "failed" ? (await row(ids["pic-down"]!)) : undefined), "the refused request's row");
    expect(refused.error_detail).toContain("could not reach the upstream");
    expect(refused.error_message).not.toContain("could not reach");
    expect(refused.credits_refunded).toBe(1);
    const leaked = await waitFor(async () => ((await row(ids["pic-500"]!))?.status === "failed" ? (await row(ids["pic-500"]!)) : undefined), "the 500's row");
    expect(leaked.error_detail).toContain("internal failure while serving account key [redacted]");
    expect(leaked.credits_refunded).toBe(1);
    const chat = (await row(ids["talk-500"]!))!;
    expect(chat.status).toBe("failed");
    expect(chat.error_detail).toContain("internal failure while serving account key [redacted]");
    for (const r of [refused, leaked, chat]) {
      expectNoSecret("error_detail", r.error_detail!);
      expect(r.error_detail!.length).toBeLessThanOrEqual(1000);
    }
    expect(await server.balance(user.userId)).toBe(10);
  });

  test("the user's history, request pages and CSV export never show it", async () => {
    const cookie = await signIn(user.email, USER_PASSWORD);
    expectNoDetail("/credits", await pageText("/credits", cookie));
    for (const id of [ids["pic-500"], ids["pic-down"], ids["talk-500"]]) {
      const html = await pageText(`/credits/requests/${id}`, cookie);
      expect(html).toContain('data-testid="request-status"');
      expectNoDetail(`the user's request page ${id}`, html);
    }
    expectNoDetail("/credits/history.csv", await pageText("/credits/history.csv", cookie));
  });

  test("admin pages show it, redacted: all requests, one user's requests, one request, the admin's own request page", async () => {
    const cookie = await signIn(admin.email, ADMIN_PASSWORD);
    const pages = ["/admin/requests", `/admin/requests?user=${encodeURIComponent(user.email)}`, `/admin/requests?id=${ids["pic-500"]}`];
    for (const path of pages) {
      const html = await pageText(path, cookie);
      expectNoSecret(path, html);
      expect(html).toContain('data-testid="error-detail"');
      expect(html).toContain("internal failure while serving account key [redacted]");
      expect(html).toContain("Detail (admins only)");
    }
    const all = await pageText(`/admin/requests?user=${encodeURIComponent(user.email)}`, cookie);
    expect(all).toContain("could not reach the upstream");
    const own = await pageText(`/credits/requests/${ids.admin}`, cookie);
    expect(own).toContain("Error detail (admins only)");
    expect(own).toContain("could not reach the upstream");
    expectNoSecret("the admin's request page", own);
  });

  test("an admin reading in Chinese gets the label in Chinese", async () => {
    const cookie = await signIn(admin.email, ADMIN_PASSWORD);
    const res = await fetch(`${server.url}/admin/requests`, { headers: { cookie, "accept-language": "zh-CN" } });
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain('lang="zh-CN"');
    expect(html).toContain("详情（仅管理员可见）");
    expect(html).not.toContain("Detail (admins only)");
    const own = await fetch(`${server.url}/credits/requests/${ids.admin}`, { headers: { cookie, "accept-language": "zh-CN" } });
    expect(await own.text()).toContain("错误详情（仅管理员可见）");
  });
});
