/**
 * The HTTP contract every route shares, over a real socket: the error shape and status for
 * each kind of bad request, x-request-id everywhere, CORS, auth failures, and the log lines.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startTestServer, type TestServer } from "../support/server";
import pkg from "../../package.json" with { type: "json" };
import { chunkedBody, rawRequest } from "../support/rawHttp";

// A JSON POST route of the API, used for the body checks (they run before the handler).
const POST_ROUTE = "/v1/chat/completions";
const MAX_BODY = 64 * 1024;

let server: TestServer;
let key: string;
let failCatalog = false;
let malformedCatalog = false;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
max_body_bytes = ${MAX_BODY}

[[upstreams]]
id = "acme"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[[upstreams.accounts]]
id = "main"
api_key = "sk-upstream-secret"

[[models]]
id = "acme/sd xl+1.0"
kind = "image"
upstream = "acme"
`,
    customize(services) {
      // Lets one test make /v1/models throw an unexpected error.
      const list = services.catalog.list.bind(services.catalog);
      services.catalog.list = () => {
        if (failCatalog) throw new Error("catalog exploded at /secret/path");
        // A model whose `created` is not a number: /v1/models then breaks its own response schema.
        if (malformedCatalog) return list().map((m) => ({ ...m, created: "soon" as unknown as number }));
        return list();
      };
    },
  });
  ({ key } = await server.userWithKey({ email: "http@example.com" }));
});
afterAll(() => server.close());

const auth = () => ({ authorization: `Bearer ${key}` });

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

async function expectError(res: Response, status: number, code: string | null, type?: string): Promise<ErrorBody["error"]> {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toStartWith("application/json");
  expect(res.headers.get("x-request-id")).toMatch(/^req_/);
  const body = (await res.json()) as ErrorBody;
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(body.error.message.length).toBeGreaterThan(10);
  expect(body.error.code).toBe(code);
  if (type) expect(body.error.type).toBe(type);
  return body.error;
}

describe("error shape and status", () => {
  test("unknown route: 404 (before auth)", async () => {
    await expectError(await fetch(`${server.url}/nowhere`), 404, "unknown_route", "not_found_error");
    await expectError(await fetch(`${server.url}/v1/nowhere`), 404, "unknown_route", "not_found_error");
  });

  test("wrong method: 405 with Allow", async () => {
    const res = await fetch(`${server.url}/v1/models`, { method: "DELETE", headers: auth() });
    const error = await expectError(res, 405, "method_not_allowed");
    expect(res.headers.get("allow")).toBe("GET");
    expect(error.message).toContain("DELETE");
    const post = await fetch(`${server.url}/v1/models`, { method: "POST", headers: auth(), body: "{}" });
    await expectError(post, 405, "method_not_allowed");
  });

  test("unsupported content type: 415", async () => {
    const res = await fetch(`${server.url}${POST_ROUTE}`, { method: "POST", headers: { ...auth(), "content-type": "text/plain" }, body: "hello" });
    const error = await expectError(res, 415, "unsupported_media_type", "invalid_request_error");
    expect(error.message).toContain("application/json");
  });

  test("malformed JSON: 400 invalid_json", async () => {
    const res = await fetch(`${server.url}${POST_ROUTE}`, { method: "POST", headers: { ...auth(), "content-type": "application/json" }, body: '{"model": "builtin-chat",' });
    await expectError(res, 400, "invalid_json", "invalid_request_error");
  });

  test("validation: 400 with param = path of the first bad field, message names field and rule", async () => {
    const res = await fetch(`${server.url}${POST_ROUTE}`, {
      method: "POST",
      headers: { ...auth(), "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }, { role: "wizard", content: "x" }] }),
    });
    const error = await expectError(res, 400, "invalid_value", "invalid_request_error");
    expect(error.param).toBe("messages[1].role");
    expect(error.message).toContain("messages[1].role");
  });

  test("body over the limit with a declared Content-Length: our JSON 413, not Bun's empty one", async () => {
    // Just over our limit, and far over Bun's own maxRequestBodySize: both must be ours.
    for (const length of [MAX_BODY + 1, 512 * 1024 * 1024]) {
      const res = await rawRequest(
        server.url,
        `POST ${POST_ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://elsewhere.example\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${length}`,
        ['{"model":"builtin-chat","messages":['],
      );
      expect(res.status).toBe(413);
      expect(res.headers["x-request-id"]).toMatch(/^req_/);
      expect(res.headers["access-control-allow-origin"]).toBe("https://elsewhere.example");
      const body = JSON.parse(res.body) as ErrorBody;
      expect(body.error).toMatchObject({ type: "invalid_request_error", code: "request_too_large", param: null });
      expect(body.error.message).toContain(String(MAX_BODY));
    }
  });

  test("an API body from an unauthenticated client is refused with 401 before it is read", async () => {
    // Declares 16 GiB and sends a few bytes: the answer cannot wait for the body.
    const res = await rawRequest(
      server.url,
      `POST ${POST_ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${16 * 1024 ** 3}`,
      ['{"model":'],
    );
    expect(res.status).toBe(401);
    expect((JSON.parse(res.body) as ErrorBody).error.code).toBe("missing_api_key");
    const chunked = await rawRequest(
      server.url,
      `POST ${POST_ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-atl-${"0".repeat(43)}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked`,
      ['9\r\n{"model":\r\n'],
    );
    expect(chunked.status).toBe(401);
    expect((JSON.parse(chunked.body) as ErrorBody).error.code).toBe("invalid_api_key");
    expect(server.services.budget.inflightBytes).toBe(0);
  });

  test("a keyless POST with no body or an empty one is 401 on every API route, not 400/415", async () => {
    for (const path of [POST_ROUTE, "/v1/images/generations", "/v1/images/edits"]) {
      await expectError(await fetch(`${server.url}${path}`, { method: "POST" }), 401, "missing_api_key");
      await expectError(await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json", "content-length": "0" } }), 401, "missing_api_key");
      await expectError(await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "text/plain" } }), 401, "missing_api_key");
    }
  });

  test("chunked body that grows over the limit: our JSON 413", async () => {
    const res = await rawRequest(
      server.url,
      `POST ${POST_ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked`,
      chunkedBody(16 * 1024, (MAX_BODY / (16 * 1024)) * 8),
    );
    expect(res.status).toBe(413);
    expect(res.headers["x-request-id"]).toMatch(/^req_/);
    expect((JSON.parse(res.body) as ErrorBody).error.code).toBe("request_too_large");
    // The budget was given back: a normal request still works.
    expect(server.services.budget.inflightBytes).toBe(0);
    expect((await fetch(`${server.url}/v1/models`, { headers: auth() })).status).toBe(200);
  });

  test("internal error: 500 server_error without internals, logged with the request id", async () => {
    failCatalog = true;
    try {
      const res = await fetch(`${server.url}/v1/models`, { headers: auth() });
      const error = await expectError(res, 500, "internal_error", "server_error");
      expect(JSON.stringify(error)).not.toContain("exploded");
      expect(JSON.stringify(error)).not.toContain("/secret/path");
      const id = res.headers.get("x-request-id")!;
      const logged = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.level === "error" && l.request_id === id);
      expect(String(logged?.error)).toContain("catalog exploded");
    } finally {
      failCatalog = false;
    }
  });
});

test("an answer that breaks its own response schema: 500, not a 400 blaming the client", async () => {
  malformedCatalog = true;
  try {
    const res = await fetch(`${server.url}/v1/models`, { headers: auth() });
    await expectError(res, 500, "internal_error", "server_error");
    // The openai clients would send it again twice (and an upstream would be asked again).
    expect(res.headers.get("x-should-retry")).toBe("false");
    const id = res.headers.get("x-request-id");
    const logged = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "response failed its schema" && l.request_id === id);
    expect(logged).toMatchObject({ level: "error", path: expect.stringContaining("created") });
    expect(JSON.stringify(logged)).not.toContain("soon");
  } finally {
    malformedCatalog = false;
  }
});

describe("authentication", () => {
  test("missing key: 401 telling how to send one", async () => {
    const error = await expectError(await fetch(`${server.url}/v1/models`), 401, "missing_api_key", "authentication_error");
    expect(error.message).toContain("Authorization: Bearer");
  });

  test("unknown and revoked keys: 401 invalid_api_key, never echoing the key", async () => {
    const wrong = `sk-atl-${"x".repeat(43)}`;
    const error = await expectError(await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${wrong}` } }), 401, "invalid_api_key");
    expect(error.message).not.toContain("xxxxxxxx");

    const other = await server.userWithKey();
    expect((await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${other.key}` } })).status).toBe(200);
    const row = (await server.services.store.keys.listForUser(other.userId))[0]!;
    await server.services.store.keys.revoke(row.id, Date.now());
    await expectError(await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${other.key}` } }), 401, "invalid_api_key");
  });

  test("disabled user: 403 account_disabled; enabled again: 200", async () => {
    const other = await server.userWithKey();
    await server.services.store.users.setDisabled(other.userId, true);
    const error = await expectError(await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${other.key}` } }), 403, "account_disabled", "permission_error");
    expect(error.message).toContain("disabled");
    await server.services.store.users.setDisabled(other.userId, false);
    expect((await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${other.key}` } })).status).toBe(200);
  });

  test("a malformed Authorization header: 401", async () => {
    await expectError(await fetch(`${server.url}/v1/models`, { headers: { authorization: `Basic ${btoa("a:b")}` } }), 401, "invalid_authorization_header");
  });
});

describe("models", () => {
  test("percent-encoded ids are decoded", async () => {
    const res = await fetch(`${server.url}/v1/models/${encodeURIComponent("acme/sd xl+1.0")}`, { headers: auth() });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: "acme/sd xl+1.0", object: "model", created: expect.any(Number), owned_by: "acme", x_atelier_price: 1 });
    const builtin = await fetch(`${server.url}/v1/models/%62uiltin-image`, { headers: auth() });
    expect(((await builtin.json()) as { id: string }).id).toBe("builtin-image");
  });

  test("an id that is not valid percent-encoding: 401 without a key, then a 400 that says what is wrong", async () => {
    await expectError(await fetch(`${server.url}/v1/models/%ZZ`), 401, "missing_api_key");
    const error = await expectError(await fetch(`${server.url}/v1/models/%ZZ`, { headers: auth() }), 400, "invalid_value");
    expect(error.param).toBe("model");
    expect(error.message).toContain("percent-encoding");
  });

  test("unknown model: 404 model_not_found with param model", async () => {
    const error = await expectError(await fetch(`${server.url}/v1/models/${encodeURIComponent("no/such model")}`, { headers: auth() }), 404, "model_not_found");
    expect(error.param).toBe("model");
    expect(error.message).toContain("no/such model");
  });
});

test("a short Host header (e.g. a compose service called `app` on port 80) routes like any other", async () => {
  for (const host of ["app", "a", "ab:80"]) {
    const res = await rawRequest(server.url, `GET /v1/models/builtin-image?x=1 HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${key}`);
    expect({ host, status: res.status }).toEqual({ host, status: 200 });
    expect((JSON.parse(res.body) as { id: string }).id).toBe("builtin-image");
  }
});

describe("x-request-id and CORS", () => {
  test("every response carries a distinct x-request-id", async () => {
    const responses = await Promise.all([
      fetch(`${server.url}/healthz`),
      fetch(`${server.url}/readyz`),
      fetch(`${server.url}/docs`),
      fetch(`${server.url}/openapi.json`),
      fetch(`${server.url}/v1/models`, { headers: auth() }),
      fetch(`${server.url}/v1/models`),
      fetch(`${server.url}/nowhere`),
      fetch(`${server.url}/v1/models`, { method: "OPTIONS", headers: { origin: "https://elsewhere.example", "access-control-request-method": "GET" } }),
    ]);
    const ids = responses.map((r) => r.headers.get("x-request-id"));
    for (const id of ids) expect(id).toMatch(/^req_[0-9A-Za-z]{10,}$/);
    expect(new Set(ids).size).toBe(ids.length);
    await Promise.all(responses.map((r) => r.arrayBuffer()));
  });

  test("a preflight from a foreign origin echoes the requested headers and allows GET, POST, OPTIONS", async () => {
    const requested = "authorization, content-type, x-stainless-os, x-stainless-retry-count, openai-organization, openai-project";
    const res = await fetch(`${server.url}${POST_ROUTE}`, {
      method: "OPTIONS",
      headers: { origin: "https://elsewhere.example", "access-control-request-method": "POST", "access-control-request-headers": requested },
    });
    expect(res.status).toBeLessThan(300);
    expect(res.headers.get("access-control-allow-origin")).toBe("https://elsewhere.example");
    const allowed = (res.headers.get("access-control-allow-headers") ?? "").toLowerCase().split(/\s*,\s*/);
    for (const h of requested.split(", ")) expect(allowed).toContain(h);
    const methods = (res.headers.get("access-control-allow-methods") ?? "").split(/\s*,\s*/);
    expect(methods).toEqual(expect.arrayContaining(["GET", "POST", "OPTIONS"]));
    expect(res.headers.get("access-control-allow-credentials")).not.toBe("true");
    expect(res.headers.get("x-request-id")).toMatch(/^req_/);
  });

  test("a preflight that asks for no headers gets no Allow-Headers value (not the string 'undefined')", async () => {
    const res = await fetch(`${server.url}${POST_ROUTE}`, {
      method: "OPTIONS",
      headers: { origin: "https://elsewhere.example", "access-control-request-method": "GET" },
    });
    expect(res.status).toBeLessThan(300);
    expect(res.headers.get("access-control-allow-headers")).toBeNull();
    expect(res.headers.get("access-control-allow-origin")).toBe("https://elsewhere.example");
  });

  test("a request without an Origin (a server-side client) gets no CORS headers but Vary: Origin; the workbench never gets them", async () => {
    for (const headers of [auth(), {}]) {
      const res = await fetch(`${server.url}/v1/models`, { headers });
      expect(res.headers.get("access-control-allow-origin")).toBeNull();
      expect(res.headers.get("access-control-expose-headers")).toBeNull();
      expect(res.headers.get("vary")).toBe("Origin");
      expect(res.headers.get("x-request-id")).toMatch(/^req_/);
      await res.arrayBuffer();
    }
    const page = await fetch(`${server.url}/signin`, { headers: { origin: "https://elsewhere.example" } });
    expect(page.headers.get("access-control-allow-origin")).toBeNull();
    expect(page.headers.get("access-control-expose-headers")).toBeNull();
    await page.arrayBuffer();
  });

  test("responses, errors included, let a browser read the body and the retry headers", async () => {
    for (const headers of [auth(), {}]) {
      const res = await fetch(`${server.url}/v1/models`, { headers: { ...headers, origin: "https://elsewhere.example" } });
      expect(res.headers.get("access-control-allow-origin")).toBe("https://elsewhere.example");
      const exposed = (res.headers.get("access-control-expose-headers") ?? "").split(/\s*,\s*/);
      expect(exposed).toEqual(expect.arrayContaining(["x-request-id", "retry-after", "retry-after-ms", "x-should-retry"]));
      await res.arrayBuffer();
    }
  });
});

describe("operations", () => {
  test("healthz and readyz", async () => {
    expect(await (await fetch(`${server.url}/healthz`)).json()).toEqual({ status: "ok", version: pkg.version, commit: expect.stringMatching(/^([0-9a-f]{4,40}|unknown)$/) });
    expect(await (await fetch(`${server.url}/readyz`)).json()).toEqual({ status: "ready" });
  });

  test("one structured log line per request, never a key", async () => {
    const res = await fetch(`${server.url}/v1/models?probe=log`, { headers: auth() });
    const id = res.headers.get("x-request-id");
    await res.arrayBuffer();
    const lines = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    const line = lines.find((l) => l.msg === "request" && l.request_id === id);
    expect(line).toMatchObject({ level: "info", method: "GET", path: "/v1/models", status: 200, user_id: expect.any(Number) });
    expect(typeof line?.duration_ms).toBe("number");
    const all = server.logs.join("\n");
    expect(all).not.toContain(key);
    expect(all).not.toContain(key.slice(15));
    expect(all).not.toContain("sk-upstream-secret");
    expect(all).not.toMatch(/sk-atl-[0-9A-Za-z]{20,}/);
  });

  test("image and chat log lines say who spent what: user, key prefix, model, credits charged and refunded, upstream", async () => {
    const spender = await server.userWithKey({ credits: 5 });
    const post = async (path: string, body: unknown) => {
      const res = await fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${spender.key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      await res.arrayBuffer();
      const id = res.headers.get("x-request-id");
      return server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "request" && l.request_id === id);
    };
    const who = { user_id: spender.userId, key_prefix: spender.key.slice(0, 15) };
    expect(await post("/v1/images/generations", { model: "builtin-image", prompt: "a lighthouse", size: "256x256" })).toMatchObject({
      ...who, status: 200, model: "builtin-image", credits_charged: 1, credits_refunded: 0, upstream: null, outcome: "succeeded",
    });
    // The upstream is unreachable: charged, then refunded, and the line names the account tried.
    expect(await post("/v1/images/generations", { model: "acme/sd xl+1.0", prompt: "a lighthouse" })).toMatchObject({
      ...who, model: "acme/sd xl+1.0", credits_charged: 1, credits_refunded: 1, upstream: "acme/main", outcome: "failed",
    });
    expect(await post("/v1/chat/completions", { model: "builtin-chat", messages: [{ role: "user", content: "hi" }] })).toMatchObject({
      ...who, status: 200, model: "builtin-chat", credits_charged: 0, credits_refunded: 0,
    });
    expect(server.logs.join("\n")).not.toContain(spender.key.slice(15));
  });

  test("the listening line shows the address actually bound (port 0 resolved)", () => {
    const line = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "listening");
    expect(line).toMatchObject({ address: `127.0.0.1:${server.port}`, url: `http://127.0.0.1:${server.port}` });
    expect(server.port).toBeGreaterThan(0);
  });

  test("the log line of a key holder's rejected POST names the user (a 400 is still someone's request)", async () => {
    const res = await fetch(`${server.url}${POST_ROUTE}`, { method: "POST", headers: { ...auth(), "content-type": "application/json" }, body: JSON.stringify({ model: "builtin-chat" }) });
    expect(res.status).toBe(400);
    const id = res.headers.get("x-request-id");
    await res.arrayBuffer();
    const line = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === "request" && l.request_id === id);
    expect(line).toMatchObject({ method: "POST", path: POST_ROUTE, status: 400, user_id: expect.any(Number) });
  });
});
