/**
 * A streamed chat completion whose upstream fails before the reply's first piece is answered as
 * the same request without `stream` is: the JSON error with its status and headers, so the
 * openai client raises RateLimitError / BadRequestError / InternalServerError (and would retry
 * by them), not a 200 whose only event is an error. A real listening server, the official
 * client and the fake OpenAI upstream; one account whose failures never cool it down, so every
 * test reaches the upstream.
 */
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { startTestServer, type TestServer } from "../support/server";
import { startFakeOpenAI } from "../support/fakeUpstreams";
import { until } from "../support/until";

const KEY = "sk-upstream-chat-errors-0123456789abcdef";
const DEADLINE_MS = 1500;
const fake = startFakeOpenAI();
let server: TestServer;
let user: { userId: number; key: string };
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
stream_heartbeat_ms = 40

[limits]
generation_timeout_ms = ${DEADLINE_MS}

[chat]
allow_streaming = true

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${fake.url}/v1"
max_attempts = 3
failure_threshold = 1000
accounts = [{ id = "main", api_key = "${KEY}" }]

[[models]]
id = "up-chat"
kind = "chat"
upstream = "oa"
upstream_model = "gpt-up"
`,
  });
  user = await server.userWithKey({ credits: 0 });
  client = new OpenAI({ apiKey: user.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  await fake.stop();
});

// A 429's rest (retry-after-ms 40) is over before the next test, even one that failed halfway.
afterEach(async () => {
  fake.reset();
  await Bun.sleep(60);
});

const body = (stream: boolean) => JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "hi" }], ...(stream ? { stream: true } : {}) });
const post = (stream: boolean) =>
  fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${user.key}`, "content-type": "application/json" }, body: body(stream) });

/** What the client sees of a response: enough to tell two answers apart. */
async function answerOf(res: Response) {
  return { status: res.status, contentType: res.headers.get("content-type"), retryAfter: res.headers.get("retry-after"), error: ((await res.json()) as { error: unknown }).error };
}

/** The streamed request through the openai client, read to its end: the error it raises. */
function streamedError(): Promise<unknown> {
  return (async () => {
    const stream = await client.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "hi" }], stream: true });
    for await (const _ of stream);
  })().then(
    () => undefined,
    (e: unknown) => e,
  );
}

const rowOf = async (id: string) => {
  for (let i = 0; i < 200; i++) {
    const row = (await server.services.store.requests.list({ userId: user.userId })).find((r) => r.id === id);
    if (row) return row;
    await Bun.sleep(10);
  }
  throw new Error(`no history row ${id}`);
};

test("a 429 before the first piece: the streamed request gets the non-streamed answer, 429 with retry-after; the client raises RateLimitError", async () => {
  // retry-after-ms keeps the account's rest short, so each request below reaches the upstream.
  const rateLimited = { kind: "429", retryAfterMs: "40" } as const;
  fake.reset();
  fake.queueFaults(KEY, rateLimited);
  const plain = await answerOf(await post(false));
  await Bun.sleep(60);
  fake.queueFaults(KEY, rateLimited);
  const res = await post(true);
  const streamed = await answerOf(res);
  // Worded for a chat model as much as an image model.
  expect(plain).toMatchObject({ status: 429, retryAfter: "1", error: { code: "upstream_rate_limited", message: "The upstream service behind this model is rate limiting requests; retry after 1 s." } });
  expect(streamed).toEqual(plain);
  expect(streamed.contentType).toStartWith("application/json");
  expect(await rowOf(res.headers.get("x-request-id")!)).toMatchObject({ status: "failed", error_code: "upstream_rate_limited" });

  await Bun.sleep(60);
  fake.queueFaults(KEY, rateLimited);
  const error = await streamedError();
  expect(error).toBeInstanceOf(OpenAI.RateLimitError);
  expect((error as InstanceType<typeof OpenAI.RateLimitError>).headers.get("retry-after")).toBe("1");
  expect(fake.received).toHaveLength(3);
});

test("a request the upstream refuses (400, context length) before the first piece: 400 as without stream, BadRequestError, asked once", async () => {
  fake.reset();
  const refused = { kind: "status", status: 400, message: "This model's maximum context length is 8192 tokens." } as const;
  fake.queueFaults(KEY, refused);
  const plain = await answerOf(await post(false));
  fake.queueFaults(KEY, refused);
  const streamed = await answerOf(await post(true));
  expect(plain.status).toBe(400);
  expect(streamed).toEqual(plain);

  fake.queueFaults(KEY, refused);
  const before = fake.received.length;
  const error = await streamedError();
  expect(error).toBeInstanceOf(OpenAI.BadRequestError);
  expect(fake.received.length - before).toBe(1);
});

test("every attempt failing before the first piece: retried as usual (nothing was passed on), then the non-streamed 5xx; InternalServerError", async () => {
  fake.reset();
  const failed = { kind: "status", status: 500, message: "boom" } as const;
  fake.queueFaults(KEY, failed, failed, failed);
  const plain = await answerOf(await post(false));
  fake.queueFaults(KEY, failed, failed, failed);
  const streamed = await answerOf(await post(true));
  expect(plain.status).toBeGreaterThanOrEqual(500);
  expect(streamed).toEqual(plain);
  expect(fake.received).toHaveLength(6);

  fake.queueFaults(KEY, failed, failed, failed);
  expect(await streamedError()).toBeInstanceOf(OpenAI.InternalServerError);

  // One failed attempt and then a reply: the stream carries the reply once.
  fake.reset();
  fake.queueFaults(KEY, failed);
  const stream = await client.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "again" }], stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
  expect(text).toBe("echo: again");
  expect(fake.received).toHaveLength(2);
});

test("an upstream silent before the first piece: the deadline bounds the wait with the non-streamed 504", async () => {
  fake.reset();
  fake.queueFaults(KEY, { kind: "hang" });
  const started = performance.now();
  const res = await post(true);
  const waited = performance.now() - started;
  const answer = await answerOf(res);
  expect(answer).toMatchObject({ status: 504, contentType: expect.stringMatching(/^application\/json/), error: { code: "timeout" } });
  // Advice that fits a chat too, not only image sizes.
  expect((answer.error as { message: string }).message).toContain("a shorter reply for a chat");
  expect(waited).toBeGreaterThanOrEqual(DEADLINE_MS - 50);
  expect(waited).toBeLessThan(DEADLINE_MS + 1500);
  expect(await rowOf(res.headers.get("x-request-id")!)).toMatchObject({ status: "failed", error_code: "timeout" });
});

test("a client that leaves before the first piece stops the request at once: the row says client_disconnected, long before the deadline", async () => {
  fake.reset();
  fake.queueFaults(KEY, { kind: "hang" });
  const fresh = await server.userWithKey({ credits: 0 });
  const leave = new AbortController();
  const started = performance.now();
  const answer = fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
    body: body(true),
    signal: leave.signal,
  }).catch(() => null);
  await until(() => fake.received.length === 1, "the upstream request");
  leave.abort();
  expect(await answer).toBeNull();
  const rows = () => server.services.store.requests.list({ userId: fresh.userId });
  await until(async () => (await rows()).length === 1, "the history row");
  expect((await rows())[0]).toMatchObject({ status: "failed", error_code: "client_disconnected" });
  expect(performance.now() - started).toBeLessThan(DEADLINE_MS - 300);
});

test("once the first piece is out, the stream is the answer: 200, the role chunk, the text, [DONE]", async () => {
  fake.reset();
  fake.setEventGapMs(100);
  const res = await post(true);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toStartWith("text/event-stream");
  const events = (await res.text()).split("\n\n").filter((e) => e.startsWith("data: "));
  expect(events.at(-1)).toBe("data: [DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)) as OpenAI.ChatCompletionChunk);
  expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "", refusal: null });
  expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("echo: hi");
  fake.setEventGapMs(0);
});
