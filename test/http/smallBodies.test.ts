/**
 * The small-body fast path of the body guard (http/body guardBody, http/slowBodyWatch): a small
 * declared API body is not wrapped, yet its size stays bounded by its Content-Length (Bun frames
 * it) and a drip still ends in 408, over raw sockets against a real server.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startTestServer, type TestServer } from "../support/server";
import { rawRequest } from "../support/rawHttp";
import { BodyBudget, guardBody, type BodyRules } from "../../src/http/body";
import { metaOf } from "../../src/http/requestMeta";
import { SMALL_API_BODY_BYTES } from "../../src/core/limits";
import { SLOW_BODY_TICK_MS, watchedBodies } from "../../src/http/slowBodyWatch";

const GRACE_MS = 200;
const MIN_RATE = 100;

let server: TestServer;
let key: string;
let userId: number;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
body_grace_ms = ${GRACE_MS}
min_body_bytes_per_s = ${MIN_RATE}
`,
  });
  ({ key, userId } = await server.userWithKey({ credits: 5 }));
});
afterAll(() => server.close());

const chat = JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] });
const head = (length: number) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${length}`;

describe("which bodies take the fast path", () => {
  const rules: BodyRules = { maxBytes: 1024 * 1024, graceMs: 1000, minBytesPerSecond: 1000, smallBodyBytes: SMALL_API_BODY_BYTES };
  const post = (body: BodyInit, headers: Record<string, string> = {}) =>
    new Request("http://x/v1/chat/completions", { method: "POST", body, headers, duplex: "half" } as RequestInit);

  test("a small declared body is left as it is, marked for a paced read", () => {
    const request = post(chat, { "content-length": String(chat.length) });
    const budget = new BodyBudget(rules.maxBytes, rules.maxBytes);
    expect(guardBody(request, rules, budget)).toBe(request);
    expect(metaOf(request).smallBody).toBe(rules);
    expect(metaOf(request).bodyUnread).toBe(true);
  });

  test("a larger declared body, a chunked one, and a route without the fast path are wrapped", () => {
    const budget = new BodyBudget(rules.maxBytes, rules.maxBytes);
    const big = "x".repeat(SMALL_API_BODY_BYTES + 1);
    const large = post(big, { "content-length": String(big.length) });
    expect(guardBody(large, rules, budget)).not.toBe(large);
    expect(metaOf(large).smallBody).toBeUndefined();
    const chunked = post(new Blob([chat]).stream());
    expect(guardBody(chunked, rules, budget)).not.toBe(chunked);
    const form = post(chat, { "content-length": String(chat.length) });
    expect(guardBody(form, { ...rules, smallBodyBytes: 0 }, budget)).not.toBe(form);
  });
});

describe("over a raw socket", () => {
  test("a small body arriving promptly is answered on a connection kept open", async () => {
    const res = await rawRequest(server.url, head(chat.length), [chat]);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).object).toBe("chat.completion");
    expect(res.headers.connection).not.toBe("close");
    expect(watchedBodies()).toBe(0);
  });

  test("the declared length bounds the body: bytes after it are not part of it", async () => {
    // Were the trailing bytes read into the body, the JSON would not parse (400 invalid_json).
    const res = await rawRequest(server.url, head(chat.length), [chat + "GARBAGE-AFTER-THE-DECLARED-LENGTH"]);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).object).toBe("chat.completion");
  });

  test("a body dripping one byte at a time ends in 408 before it is complete, charging and holding nothing", async () => {
    const body = JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "x".repeat(40) }] });
    // Deadline: grace + length / rate = 0.2 s + ~0.9 s; one byte every 0.2 s would take ~18 s.
    let sent = 0;
    async function* drip() {
      for (const byte of body) {
        yield byte;
        sent++;
        await Bun.sleep(200);
      }
    }
    const before = await server.balance(userId);
    const res = await rawRequest(server.url, head(body.length), drip());
    expect(res.status).toBe(408);
    expect(JSON.parse(res.body).error.code).toBe("request_timeout");
    expect(res.headers.connection).toBe("close");
    // Answered near grace + length/rate (plus one tick), far before the drip would have ended.
    const bound = (GRACE_MS + (body.length / MIN_RATE) * 1000 + SLOW_BODY_TICK_MS) / 200;
    expect(sent).toBeLessThan(body.length);
    expect(sent).toBeLessThanOrEqual(Math.ceil(bound) + 3);
    expect(await server.balance(userId)).toBe(before);
    expect(server.services.budget.inflightBytes).toBe(0);
    expect(watchedBodies()).toBe(0);
  });

  test("a body slower than the grace but within its deadline is read whole", async () => {
    // 10 bytes every 50 ms is 200 B/s, over the 100 B/s minimum; it takes longer than the grace.
    async function* steady() {
      for (let at = 0; at < chat.length; at += 10) {
        yield chat.slice(at, at + 10);
        await Bun.sleep(50);
      }
    }
    const res = await rawRequest(server.url, head(chat.length), steady());
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).object).toBe("chat.completion");
  });
});

describe("the JSON content types the API reads", () => {
  const send = (contentType: string) =>
    fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": contentType }, body: chat });

  test("application/json, with parameters, in any case, and +json types are read as JSON", async () => {
    for (const type of ["application/json", "application/json; charset=utf-8", "Application/JSON", " application/json ;charset=UTF-8", "application/vnd.api+json"]) {
      const res = await send(type);
      expect({ type, status: res.status }).toEqual({ type, status: 200 });
      expect(((await res.json()) as { object: string }).object).toBe("chat.completion");
    }
  });

  test("anything else is 415 naming what the route takes", async () => {
    for (const type of ["text/plain", "application/jsonx", "application/x-www-form-urlencoded"]) {
      const res = await send(type);
      expect({ type, status: res.status }).toEqual({ type, status: 415 });
      const body = (await res.json()) as { error: { message: string; code: string } };
      expect(body.error.message).toContain("application/json");
    }
  });
});
