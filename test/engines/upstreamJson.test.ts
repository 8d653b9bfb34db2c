/**
 * callJson reads an answer of declared length in one native call (res.json()) and a chunked
 * one as it streams: both must agree on what a client of the pool relies on: the parsed
 * answer, a body that is not JSON as a failed attempt naming the status, and our key never
 * echoed. Against a real loopback server, with and without Content-Length.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { callJson } from "../../src/engines/upstreamHttp";
import { AttemptFailure } from "../../src/engines/pool";
import { SecretRedactor } from "../../src/engines/redact";

const SECRET = "sk-upstream-secret-1234567890";
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(request) {
    const url = new URL(request.url);
    const text = url.searchParams.get("body") ?? "";
    const status = Number(url.searchParams.get("status") ?? 200);
    const chunked = url.searchParams.has("chunked");
    const body = chunked
      ? new ReadableStream({
          start(c) {
            c.enqueue(new TextEncoder().encode(text.slice(0, 3)));
            c.enqueue(new TextEncoder().encode(text.slice(3)));
            c.close();
          },
        })
      : text;
    return new Response(body, { status, headers: { "content-type": "application/json" } });
  },
});
afterAll(() => server.stop(true));

const call = (body: string, opts: { chunked?: boolean; status?: number } = {}) => {
  const q = new URLSearchParams({ body, status: String(opts.status ?? 200) });
  if (opts.chunked) q.set("chunked", "1");
  return callJson({
    url: `http://127.0.0.1:${server.port}/?${q}`,
    body: "{}",
    headers: { "content-type": "application/json" },
    signal: new AbortController().signal,
    redactor: SecretRedactor.forAccounts([{ id: "a", api_key: SECRET }] as never),
    now: Date.now,
  });
};

const failure = async (p: Promise<unknown>): Promise<AttemptFailure> => {
  try {
    await p;
  } catch (e) {
    if (e instanceof AttemptFailure) return e;
    throw e;
  }
  throw new Error(`expected an AttemptFailure, got an answer: ${JSON.stringify(await p)}`);
};

describe("callJson", () => {
  for (const chunked of [false, true]) {
    const how = chunked ? "chunked" : "with a Content-Length";
    test(`parses a JSON answer sent ${how}`, async () => {
      expect(await call(JSON.stringify({ choices: [{ message: { content: "héllo ✓" } }] }), { chunked })).toEqual({ choices: [{ message: { content: "héllo ✓" } }] });
    });

    test(`a 200 whose body is not JSON, sent ${how}, is a failed attempt naming the status`, async () => {
      for (const body of ["{not json", "", `<html>${SECRET}</html>`]) {
        const e = await failure(call(body, { chunked }));
        expect(e.kind).toBe("failed");
        expect(e.status).toBe(200);
        expect(e.message).toBe("upstream answered 200 with a body that is not JSON");
        expect(e.message).not.toContain(SECRET);
      }
    });
  }

  test("an error status keeps its own failure (the body is read as the message, our key redacted)", async () => {
    const e = await failure(call(JSON.stringify({ error: { message: `bad key ${SECRET}` } }), { status: 401 }));
    expect(e.kind).toBe("auth");
    expect(e.message).toContain("credentials refused (401)");
    expect(e.message).not.toContain(SECRET);
  });
});
