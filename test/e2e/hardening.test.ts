/**
 * Attacks a public deployment meets, replayed against a real listening server over raw sockets:
 * malformed HTTP, deeply nested JSON, anonymous clients spending the upload budget, slow
 * bodies, and answers that leave a body unread on a keep-alive connection.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { startTestServer, type TestServer } from "../support/server";
import { rawRequest } from "../support/rawHttp";
import { MAX_FORM_PARTS } from "../../src/http/body";

const MAX_FORM_BODY = 64 * 1024;
const GRACE_MS = 300;
const MIN_RATE = 2000;

let server: TestServer;
let key: string;
let userId: number;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
max_inflight_body_bytes = ${4 * 1024 * 1024}
max_body_bytes = ${4 * 1024 * 1024} # the budget must hold the largest body (src/config.ts)
max_form_body_bytes = ${MAX_FORM_BODY}
body_grace_ms = ${GRACE_MS}
min_body_bytes_per_s = ${MIN_RATE}
`,
  });
  ({ key, userId } = await server.userWithKey({ credits: 5 }));
});
afterAll(() => server.close());

/** Sends raw bytes and collects everything until the server closes or `ms` pass. */
function rawExchange(bytes: string, ms = 3000): Promise<{ text: string; closedByServer: boolean }> {
  const { hostname, port } = new URL(server.url);
  return new Promise((resolve, reject) => {
    let text = "";
    const socket = connect({ host: hostname, port: Number(port) });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ text, closedByServer: false });
    }, ms);
    socket.on("data", (d) => (text += d.toString("latin1")));
    socket.on("error", (e) => (clearTimeout(timer), reject(e)));
    socket.on("close", () => (clearTimeout(timer), resolve({ text, closedByServer: true })));
    socket.on("connect", () => socket.write(bytes));
  });
}

/** What must never be in any answer: Bun's development page, a stack, a file path or source. */
function expectNoInternals(text: string): void {
  expect(text).not.toContain("<!doctype html>");
  expect(text).not.toMatch(/\bat [\w.<>]+ \(/); // stack frame
  expect(text).not.toMatch(/\.(ts|js):\d+/);
  expect(text).not.toContain(process.cwd());
  expect(text).not.toContain("node_modules");
  expect(text).not.toContain("/src/");
}

describe("malformed HTTP", () => {
  const cases: [string, string][] = [
    ["a Host with a space", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n"],
    ["HTTP/1.0 without a Host", "GET /healthz HTTP/1.0\r\n\r\n"],
    ["HTTP/1.1 without a Host", "GET /healthz HTTP/1.1\r\n\r\n"],
    ["an unclosed IPv6 Host", "GET /v1/models HTTP/1.1\r\nHost: [::1\r\n\r\n"],
    ["a Host with an out-of-range port", "GET /v1/models HTTP/1.1\r\nHost: a:99999\r\n\r\n"],
    ["a malformed Host on an API POST with a body", "POST /v1/chat/completions HTTP/1.1\r\nHost: a b\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"],
    ["a malformed Host on a workbench form", "POST /signin HTTP/1.1\r\nHost: \u0001\r\nContent-Length: 3\r\n\r\na=b"],
    ["an absolute-form target", "GET http://evil.example/healthz HTTP/1.1\r\nHost: x\r\n\r\n"],
    ["bad percent-encoding", "GET /v1/models/%zz HTTP/1.1\r\nHost: x\r\n\r\n"],
    ["an unknown method", "BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n"],
    ["garbage for a request line", "\u0000\u0001\u0002 what\r\n\r\n"],
    ["a negative Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"],
    ["a Content-Length with a sign", "POST /signin HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nabcde"],
    ["both Content-Length and chunked", "POST /signin HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
    ["a bad chunk size", "POST /signin HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"],
    ["a header without a colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n"],
    ["a 64 KiB header", `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(64 * 1024)}\r\n\r\n`],
    ["a path of dot segments", "GET /../../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"],
  ];
  for (const [name, bytes] of cases) {
    test(`${name}: a 4xx without internals, never a 5xx`, async () => {
      const { text, closedByServer } = await rawExchange(bytes, 1500);
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
      // Our answer, Bun's own bare 400 for what it cannot parse, or (an unknown method) Bun
      // closing the connection without a word; never a 5xx, never a hanging socket.
      if (text === "") expect(closedByServer).toBe(true);
      else expect(status).toBeGreaterThanOrEqual(200);
      expect(status).toBeLessThan(500);
      expect(text.length).toBeLessThan(4096);
      expectNoInternals(text);
    });
  }

  test("a malformed Host is our 400 invalid_host, with a request id and a log line", async () => {
    const logsBefore = server.logs.length;
    const res = await rawRequest(server.url, "GET /healthz HTTP/1.1\r\nHost: a b");
    expect(res.status).toBe(400);
    expect(res.headers["x-request-id"]).toMatch(/^req_/);
    const body = JSON.parse(res.body);
    expect(body.error).toEqual({ message: expect.stringContaining("Host header"), type: "invalid_request_error", param: null, code: "invalid_host" });
    const line = server.logs.slice(logsBefore).map((l) => JSON.parse(l)).find((l) => l.request_id === res.headers["x-request-id"]);
    expect(line).toMatchObject({ msg: "request", status: 400, path: null });
  });
});

describe("deeply nested JSON", () => {
  const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
  const routes = [
    { path: "/v1/chat/completions", body: (model: string) => `{"model":${model},"messages":[{"role":"user","content":"hi"}]}` },
    { path: "/v1/images/generations", body: (model: string) => `{"model":${model},"prompt":"a cat"}` },
  ];
  for (const { path, body } of routes) {
    for (const depth of [65, 5000, 20_000, 60_000]) {
      test(`${path} with a value ${depth} levels deep: 400 invalid_json naming the limit, nothing charged`, async () => {
        const res = await fetch(server.url + path, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: body(nested(depth)),
        });
        expect(res.status).toBe(400);
        const err = (await res.json()).error;
        expect(err.code).toBe("invalid_json");
        expect(err.message).toContain("64 levels");
        expect(await server.balance(userId)).toBe(5);
      });
    }
  }

  test("64 levels are parsed (and then judged by the schema, not refused as JSON)", async () => {
    // The body object is level 1; 63 more levels of arrays reach the limit exactly.
    const res = await fetch(server.url + "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: `{"model":${nested(63)},"messages":[{"role":"user","content":"hi"}]}`,
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ code: "invalid_value", param: "model" });
  });

  test("brackets inside strings do not count, escaped quotes do not end a string", async () => {
    const res = await fetch(server.url + "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: `\\"${"[{".repeat(5000)}\\\\` }] }),
    });
    expect(res.status).toBe(200);
  });

  test("a workbench form posted as deeply nested JSON is refused the same way", async () => {
    const res = await fetch(server.url + "/signin", {
      method: "POST",
      headers: { "content-type": "application/json", origin: server.url },
      body: `{"email":${nested(20_000)}}`,
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error.code).toBe("invalid_json");
  });
});

describe("multipart bodies of many parts", () => {
  const form = (names: string[]) => names.map((n) => `--b\r\nContent-Disposition: form-data; name="${n}"\r\n\r\nv\r\n`).join("") + "--b--\r\n";
  const edit = (body: string) =>
    fetch(server.url + "/v1/images/edits", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "multipart/form-data; boundary=b" }, body });

  test("40 000 small parts (2 MB): 400 invalid_multipart naming the limit, nothing charged", async () => {
    const res = await edit(form(Array.from({ length: 40_000 }, (_, i) => `k${i}`)));
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ type: "invalid_request_error", code: "invalid_multipart", param: null, message: expect.stringContaining(`${MAX_FORM_PARTS} parts`) });
    expect(await server.balance(userId)).toBe(5);
  });

  test(`${MAX_FORM_PARTS} parts are read (and then judged by the schema); a field named __proto__ is a field like any other`, async () => {
    const names = ["prompt", "__proto__", ...Array.from({ length: MAX_FORM_PARTS - 2 }, (_, i) => `k${i}`)];
    const res = await edit(form(names));
    expect(res.status).toBe(400);
    const error = (await res.json()).error;
    expect(error.code).not.toBe("invalid_multipart");
    expect(error.param).toBe("image");
    expect(await server.balance(userId)).toBe(5);
  });
});

describe("idle keep-alive connections after a long-running route", () => {
  // Bun checks idle sockets every few seconds: with a 1 s idle timeout a socket closes within
  // about 4-8 s; one still open after 15 s has no timeout at all.
  const WAIT_MS = 15_000;

  /** Sends one request on a fresh socket and reports when the server closed it after answering. */
  function closedAfterAnswer(url: string, head: string, body = ""): Promise<{ status: string; text: string; closedMs: number | null }> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      let text = "";
      const socket = connect({ host: hostname, port: Number(port) });
      const timer = setTimeout(() => {
        socket.destroy();
        resolve({ status: text.slice(9, 12), text, closedMs: null });
      }, WAIT_MS);
      const started = performance.now();
      socket.on("data", (d) => (text += d.toString("latin1")));
      socket.on("error", (e) => (clearTimeout(timer), reject(e)));
      socket.on("close", () => (clearTimeout(timer), resolve({ status: text.slice(9, 12), text, closedMs: performance.now() - started })));
      socket.on("connect", () => socket.write(`${head}Host: x\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`));
    });
  }

  test("a keyless POST, an answered chat and a streamed chat each leave a socket that still times out or closes", async () => {
    const idle = await startTestServer({
      config: (c) => {
        c.server.idle_timeout_s = 1;
        c.chat.allow_streaming = true;
      },
    });
    try {
      const user = await idle.userWithKey({ credits: 1 });
      const chat = (stream: boolean) => JSON.stringify({ model: "builtin-chat", stream, messages: [{ role: "user", content: "hi" }] });
      const post = `POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n`;
      const [keyless, answered, streamed] = await Promise.all([
        closedAfterAnswer(idle.url, post),
        closedAfterAnswer(idle.url, `${post}Authorization: Bearer ${user.key}\r\n`, chat(false)),
        closedAfterAnswer(idle.url, `${post}Authorization: Bearer ${user.key}\r\n`, chat(true)),
      ]);
      expect(keyless.status).toBe("401");
      expect(answered.status).toBe("200");
      expect(streamed.status).toBe("200");
      expect(streamed.text).toContain("data: [DONE]");
      expect(keyless.closedMs).not.toBeNull();
      expect(answered.closedMs).not.toBeNull();
      // A stream has the connection to itself: closed as it ends, not left without a timeout.
      expect(streamed.text.toLowerCase()).toContain("connection: close");
      expect(streamed.closedMs).not.toBeNull();
    } finally {
      await idle.close();
    }
  }, 30_000);
});

describe("anonymous clients and the upload budget", () => {
  test("workbench forms take small bodies only: a large declared one is 413 before any of it is read", async () => {
    for (const path of ["/signin", "/signup", "/setup", "/nowhere"]) {
      const res = await rawRequest(server.url, `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${180 * 1024 * 1024}`, ["email=a"]);
      expect(res.status).toBe(413);
      expect(JSON.parse(res.body).error.message).toContain(String(MAX_FORM_BODY));
      expect(res.headers.connection).toBe("close");
    }
    expect(server.services.budget.inflightBytes).toBe(0);
  });

  test("a chunked workbench body is cut at the form limit", async () => {
    const chunk = "a".repeat(16 * 1024);
    const body = Array.from({ length: 8 }, () => `${chunk.length.toString(16)}\r\n${chunk}\r\n`);
    const res = await rawRequest(server.url, "POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked", body);
    expect(res.status).toBe(413);
  });

  test("anonymous sockets that declare big bodies and stall do not make a key holder's upload 429", async () => {
    const stalled = ["/signin", "/signup", "/setup"].map((path) =>
      rawExchange(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${3 * 1024 * 1024}\r\n\r\nab`, 1000),
    );
    await Bun.sleep(100);
    // 3 MiB of a 4 MiB budget: it fits only if the anonymous sockets reserved nothing.
    const res = await fetch(server.url + "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "x" }], user: "u".repeat(3 * 1024 * 1024) }),
    });
    expect(res.status).not.toBe(429);
    expect(res.status).toBeLessThan(500);
    for (const s of await Promise.all(stalled)) expect(s.text).toMatch(/^HTTP\/1\.1 413/);
  });
});

describe("slow bodies", () => {
  for (const [path, auth] of [
    ["/v1/chat/completions", true],
    ["/v1/images/generations", true],
    ["/signin", false],
  ] as const) {
    test(`${path}: a body that stops arriving ends in 408 and the reservation is released`, async () => {
      const started = performance.now();
      const { text, closedByServer } = await rawExchange(
        `POST ${path} HTTP/1.1\r\nHost: x\r\n${auth ? `Authorization: Bearer ${key}\r\n` : ""}Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"mo`,
        20_000,
      );
      expect(text).toMatch(/^HTTP\/1\.1 408/);
      expect(text.toLowerCase()).toContain("connection: close");
      expect(text).toContain('"code":"request_timeout"');
      expect(closedByServer).toBe(true);
      // The deadline is the grace period plus the declared 5000 bytes at the minimum rate (about
      // 3 s with the ticker's lag for the small-body path): the answer comes then, well before
      // the client would give up (20 s); the bound leaves a loaded machine room.
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(server.services.budget.inflightBytes).toBe(0);
      expect(await server.balance(userId)).toBe(5);
    });
  }

  test("a chunked trickle under the minimum rate is cut too", async () => {
    async function* trickle() {
      for (let i = 0; i < 40; i++) {
        yield "1\r\na\r\n";
        await Bun.sleep(50);
      }
    }
    const res = await rawRequest(server.url, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked`, trickle());
    expect(res.status).toBe(408);
    expect(server.services.budget.inflightBytes).toBe(0);
  });

  test("a body that keeps up with the rate is read whole", async () => {
    const payload = JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "x".repeat(2000) }] });
    async function* steady() {
      // 500 bytes every 100 ms is 5000 B/s, over the 2000 B/s minimum, for about 0.5 s past the grace.
      for (let at = 0; at < payload.length; at += 500) {
        yield payload.slice(at, at + 500);
        await Bun.sleep(100);
      }
    }
    const res = await rawRequest(server.url, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}`, steady());
    expect(res.status).toBe(200);
  });
});

describe("answers that leave a body unread", () => {
  test("413 and 401 close a keep-alive connection instead of parsing the rest of the body as a request", async () => {
    const big = await rawExchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${400 * 1024 * 1024}\r\n\r\n{`);
    expect(big.text).toMatch(/^HTTP\/1\.1 413/);
    expect(big.closedByServer).toBe(true);
    const anon = await rawExchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
    expect(anon.text).toMatch(/^HTTP\/1\.1 401/);
    expect(anon.closedByServer).toBe(true);
  });

  test("a read body keeps the connection open", async () => {
    const body = JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "x" }] });
    const res = await rawExchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 500);
    expect(res.text).toMatch(/^HTTP\/1\.1 200/);
    expect(res.closedByServer).toBe(false);
  });

  test("a stop does not wait for keep-alive clients that were refused without reading their body", async () => {
    const other = await startTestServer({ toml: "[server]\nshutdown_grace_ms = 20000\nmax_body_bytes = 2048\n" });
    const { key: otherKey } = await other.userWithKey();
    for (let i = 0; i < 3; i++) {
      const res = await fetch(other.url + "/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${otherKey}`, "content-type": "application/json" },
        body: "x".repeat(64 * 1024),
      });
      expect(res.status).toBe(413);
    }
    const started = performance.now();
    await other.close();
    expect(performance.now() - started).toBeLessThan(10_000);
  });
});
