/**
 * The `openai` engine against a real fake OpenAI server on loopback: what arrives upstream,
 * how answers come back, and every fault ending in success elsewhere or a typed error.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import type { Config } from "../../src/config";
import { ModelCatalog } from "../../src/core/models";
import { EngineRegistry } from "../../src/engines/registry";
import { EngineTimeout, UpstreamFailed, UpstreamRateLimited, UpstreamRejected, type ChatDelta, type ChatJob, type ImageInput, type ImageJob, type ProgressReport } from "../../src/core/engine";
import { registerUpstreamEngines } from "../../src/engines/upstreams";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { FAKE_PARTIAL_COLOR, startFakeOpenAI } from "../support/fakeUpstreams";
import { readServerSentEvents, type ServerSentEvent } from "../../src/engines/upstreamHttp";
import { SecretRedactor } from "../../src/engines/redact";
import { AttemptFailure } from "../../src/engines/pool";
import { makePng, readPng } from "../support/images";
import { configFromToml } from "../support/server";

const KEY_A = "sk-test-account-a-0123456789abcdef";
const KEY_B = "sk-test-account-b-fedcba9876543210";

const fake = startFakeOpenAI();
afterAll(() => fake.stop());

function build(extra = "", timeoutMs = 400, accounts = `{ id = "a", api_key = "${KEY_A}", weight = 1, max_concurrency = 2 }, { id = "b", api_key = "${KEY_B}", weight = 1, max_concurrency = 1 }`) {
  const config: Config = configFromToml(`
[limits]
queue_timeout_ms = 5000
generation_timeout_ms = 5000

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${fake.url}/v1"
timeout_ms = ${timeoutMs}
${extra}
accounts = [ ${accounts} ]

[[models]]
id = "pic"
kind = "image"
upstream = "oa"
upstream_model = "gpt-image-up"

[[models]]
id = "talk"
kind = "chat"
upstream = "oa"
upstream_model = "gpt-chat-up"
`);
  const store = createStore(openDatabase(":memory:"), latestVersion());
  const registry = new EngineRegistry();
  const logs: string[] = [];
  const pools = registerUpstreamEngines(config, registry, { store: store.upstreams, clock: Date.now, logger: createLogger((l) => logs.push(l)) });
  const catalog = new ModelCatalog(config);
  const pic = catalog.get("pic")!;
  const talk = catalog.get("talk")!;
  const engine = registry.imageEngine(pic)!;
  const job = (over: Partial<ImageJob> = {}): ImageJob => ({
    model: pic,
    prompt: "a red fox",
    size: { width: 48, height: 32 },
    quality: "auto",
    images: [],
    extra: {},
    signal: new AbortController().signal,
    ...over,
  });
  return { config, store, registry, pools, pic, talk, engine, job, logs, pool: pools.get("oa")! };
}

function input(width: number, height: number, alpha = false): ImageInput {
  return { bytes: makePng(width, height, (x) => [x * 10, 50, 60, alpha ? (x < width / 2 ? 0 : 255) : 255]), mime: "image/png", width, height };
}

beforeEach(() => fake.reset());

describe("requests arriving upstream", () => {
  test("generation without references: JSON to /images/generations, model mapped, size sent, auto quality omitted", async () => {
    const { engine, job } = build();
    const img = await engine.generate(job({ extra: { background: "opaque", user: "u-1", response_format: "url" } }));
    expect(fake.received).toHaveLength(1);
    const r = fake.received[0]!;
    expect(r.path).toBe("/v1/images/generations");
    expect(r.json).toEqual({ background: "opaque", user: "u-1", model: "gpt-image-up", prompt: "a red fox", n: 1, size: "48x32" });
    expect(r.authorization).toMatch(/^Bearer sk-test-account-/);
    expect(img).toMatchObject({ mime: "image/png", width: 48, height: 32, revisedPrompt: "a red fox" });
    expect(readPng(img.bytes).width).toBe(48);
    expect(img.trace).toMatchObject({ upstreamId: "oa", attempts: 1 });
  });

  test("quality is passed when not auto; the upstream's revised_prompt passes through", async () => {
    const { engine, job } = build();
    fake.setRevisedPrompt("a red fox, sitting in snow");
    const img = await engine.generate(job({ quality: "high", size: null }));
    expect(fake.received[0]!.json).toMatchObject({ quality: "high" });
    expect(fake.received[0]!.json).not.toHaveProperty("size");
    expect(img.revisedPrompt).toBe("a red fox, sitting in snow");
  });

  test("generation with reference images: multipart to /images/edits, one image[] part per reference", async () => {
    const { engine, job } = build();
    const refs = [input(20, 20), input(30, 10)];
    await engine.generate(job({ images: refs }));
    const r = fake.received[0]!;
    expect(r.path).toBe("/v1/images/edits");
    expect(r.files!.map((f) => f.name)).toEqual(["image[]", "image[]"]);
    expect(r.files![0]!.bytes).toEqual(refs[0]!.bytes);
    expect(r.files![1]!.bytes).toEqual(refs[1]!.bytes);
    expect(r.fields).toMatchObject({ model: ["gpt-image-up"], prompt: ["a red fox"], size: ["48x32"] });
  });

  test("edit with a mask: multipart `image` and `mask`; several images go as image[]", async () => {
    const { engine, job } = build();
    const base = input(16, 16);
    const mask = input(16, 16, true);
    await engine.edit(job({ images: [base], mask }));
    const r = fake.received[0]!;
    expect(r.path).toBe("/v1/images/edits");
    expect(r.files!.map((f) => f.name)).toEqual(["image", "mask"]);
    expect(r.files![1]!.bytes).toEqual(mask.bytes);
    await engine.edit(job({ images: [base, input(8, 8)] }));
    expect(fake.received[1]!.files!.map((f) => f.name)).toEqual(["image[]", "image[]"]);
  });

  test("a url answer is downloaded and returned as bytes", async () => {
    const { engine, job } = build();
    fake.alwaysFault(KEY_A, { kind: "url" });
    fake.alwaysFault(KEY_B, { kind: "url" });
    const img = await engine.generate(job());
    expect(readPng(img.bytes)).toMatchObject({ width: 48, height: 32 });
  });

  test("a url answer larger than max_download_bytes is a failure, not an image", async () => {
    const { engine, job } = build("max_download_bytes = 1024\nmax_attempts = 1", 5000);
    fake.alwaysFault(KEY_A, { kind: "url" });
    fake.alwaysFault(KEY_B, { kind: "url" });
    const err = await engine.generate(job({ size: { width: 600, height: 600 } })).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(String(err.message)).toContain("exceeds the limit");
  });

  test("chat: params passed through, model mapped, answer normalized", async () => {
    const { registry, talk } = build();
    const engine = registry.chatEngine(talk)!;
    const out = await engine.chat({
      model: talk,
      messages: [{ role: "user", content: "hello" }],
      params: { temperature: 0.2, max_tokens: 20, model: "talk", stream: true },
      signal: new AbortController().signal,
    });
    expect(fake.received[0]!.path).toBe("/v1/chat/completions");
    expect(fake.received[0]!.json).toEqual({ temperature: 0.2, max_tokens: 20, model: "gpt-chat-up", messages: [{ role: "user", content: "hello" }], stream: false });
    expect(out).toMatchObject({ content: "echo: hello", finishReason: "stop", usage: { promptTokens: 7, completionTokens: 3 }, trace: { upstreamId: "oa", attempts: 1 } });
  });
});

describe("chat: each account's own credentials", () => {
  test("consecutive chats alternate between the accounts; each request carries the key of the account its trace names", async () => {
    const { registry, talk } = build();
    const engine = registry.chatEngine(talk)!;
    const accounts: string[] = [];
    for (let i = 0; i < 4; i++) {
      const out = await engine.chat({ model: talk, messages: [{ role: "user", content: `hello ${i}` }], params: {}, signal: new AbortController().signal });
      const account = out.trace?.accountId;
      accounts.push(String(account));
      expect(fake.received[i]!.authorization).toBe(`Bearer ${account === "a" ? KEY_A : KEY_B}`);
      expect(fake.received[i]!.json).toMatchObject({ model: "gpt-chat-up", messages: [{ role: "user", content: `hello ${i}` }] });
    }
    expect(new Set(accounts)).toEqual(new Set(["a", "b"]));
  });
});

describe("chat answers that are not chat completions", () => {
  for (const fault of [{ kind: "not-chat" }, { kind: "malformed" }, { kind: "status", status: 502 }] as const) {
    test(`${fault.kind === "status" ? "502" : fault.kind} on one account: a failed attempt, answered through the other`, async () => {
      const { registry, talk } = build();
      fake.queueFaults(KEY_A, fault);
      const out = await registry.chatEngine(talk)!.chat({ model: talk, messages: [{ role: "user", content: "hello" }], params: {}, signal: new AbortController().signal });
      expect(out.trace).toMatchObject({ upstreamId: "oa", accountId: "b", attempts: 2 });
      expect(fake.received.map((r) => r.account)).toEqual([KEY_A, KEY_B]);
      expect(out.content).toEqual(expect.any(String));
      expect(out.finishReason).toBe("stop");
    });
  }
});

describe("chat tools", () => {
  const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { query: { type: "string" } } } } }];
  const call = { id: "call_1", type: "function" as const, function: { name: "lookup", arguments: '{"query":"kettle"}' } };

  test("tools and tool_choice pass through; assistant tool calls and tool answers go in OpenAI's shape; tool_calls come back", async () => {
    const { registry, talk } = build();
    const out = await registry.chatEngine(talk)!.chat({
      model: talk,
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "find kettles" },
        { role: "assistant", content: "", toolCalls: [call] },
        { role: "tool", content: "3 kettles", toolCallId: "call_1" },
        { role: "user", content: "and toasters?" },
      ],
      params: { tools, tool_choice: "required" },
      signal: new AbortController().signal,
    });
    expect(fake.received[0]!.json).toEqual({
      tools,
      tool_choice: "required",
      model: "gpt-chat-up",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "find kettles" },
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", content: "3 kettles", tool_call_id: "call_1" },
        { role: "user", content: "and toasters?" },
      ],
      stream: false,
    });
    expect(out).toMatchObject({ content: null, finishReason: "tool_calls", toolCalls: [{ id: expect.stringMatching(/^call_fake_/), type: "function", function: { name: "lookup", arguments: '{"query":"and toasters?"}' } }] });
  });

  test("tool call arguments that echo an account's key are redacted", async () => {
    const { registry, talk } = build();
    const out = await registry.chatEngine(talk)!.chat({ model: talk, messages: [{ role: "user", content: `use ${KEY_A}` }], params: { tools }, signal: new AbortController().signal });
    expect(out.toolCalls![0]!.function.arguments).toBe('{"query":"use [redacted]"}');
  });
});

describe("streamed chat", () => {
  const streamedJob = (talk: ReturnType<typeof build>["talk"], content: string, deltas: ChatDelta[]): ChatJob => ({
    model: talk,
    messages: [{ role: "user", content }],
    params: { temperature: 0.5 },
    signal: new AbortController().signal,
    onDelta: (d) => deltas.push(d),
  });

  test("asks for a stream with usage; the pieces join to the result's content; usage read from the last chunk", async () => {
    const { registry, talk } = build();
    const deltas: ChatDelta[] = [];
    const out = await registry.chatEngine(talk)!.chat(streamedJob(talk, "a streamed hello", deltas));
    expect(fake.received[0]!.json).toEqual({ temperature: 0.5, model: "gpt-chat-up", messages: [{ role: "user", content: "a streamed hello" }], stream: true, stream_options: { include_usage: true } });
    expect(deltas.length).toBeGreaterThan(2);
    expect(deltas.map((d) => d.content ?? "").join("")).toBe("echo: a streamed hello");
    expect(out).toMatchObject({ content: "echo: a streamed hello", finishReason: "stop", usage: { promptTokens: 7, completionTokens: 3 }, trace: { attempts: 1 } });
  });

  test("an upstream that answers JSON to a streamed request is passed on as one piece", async () => {
    const { registry, talk } = build();
    fake.setStreamMode("json");
    const deltas: ChatDelta[] = [];
    const out = await registry.chatEngine(talk)!.chat(streamedJob(talk, "no streams here", deltas));
    expect(deltas).toEqual([{ content: "echo: no streams here" }]);
    expect(out.content).toBe("echo: no streams here");
  });

  test("a failure before any piece is retried on another account; one after the first piece is final", async () => {
    const { registry, talk } = build();
    fake.queueFaults(KEY_A, { kind: "status", status: 500 });
    const deltas: ChatDelta[] = [];
    const ok = await registry.chatEngine(talk)!.chat(streamedJob(talk, "retry me", deltas));
    expect(ok.trace).toMatchObject({ accountId: "b", attempts: 2 });
    expect(deltas.map((d) => d.content ?? "").join("")).toBe("echo: retry me");

    fake.reset();
    fake.alwaysFault(KEY_A, { kind: "stream-error", message: "boom" });
    fake.alwaysFault(KEY_B, { kind: "stream-error", message: "boom" });
    const broken: ChatDelta[] = [];
    const err = await registry.chatEngine(talk)!.chat(streamedJob(talk, "break me", broken)).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(String(err.message)).toContain("boom");
    expect(broken.length).toBeGreaterThan(0);
    expect(fake.received).toHaveLength(1);
  });

  test("a streamed chunk over 1 MiB fails the attempt (bounded reading), on every account", async () => {
    const { registry, talk } = build();
    fake.alwaysFault(KEY_A, { kind: "variant", name: "huge-chunk" });
    fake.alwaysFault(KEY_B, { kind: "variant", name: "huge-chunk" });
    const deltas: ChatDelta[] = [];
    const err = await registry.chatEngine(talk)!.chat(streamedJob(talk, "big", deltas)).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(String(err.message)).toContain("exceeds the limit");
    expect(deltas).toEqual([]);
  });

  test("streamed tool calls: the first fragment carries id, type and name; arguments arrive in pieces and are assembled", async () => {
    const { registry, talk } = build();
    const deltas: ChatDelta[] = [];
    const job = streamedJob(talk, "kettles", deltas);
    const out = await registry.chatEngine(talk)!.chat({ ...job, params: { tools: [{ type: "function", function: { name: "lookup" } }] } });
    const pieces = deltas.flatMap((d) => d.toolCalls ?? []);
    expect(pieces[0]).toMatchObject({ index: 0, id: expect.stringMatching(/^call_fake_/), type: "function", function: { name: "lookup" } });
    expect(pieces.map((p) => p.function?.arguments ?? "").join("")).toBe('{"query":"kettles"}');
    expect(out).toMatchObject({ content: null, finishReason: "tool_calls", toolCalls: [{ function: { name: "lookup", arguments: '{"query":"kettles"}' } }] });
  });
});

describe("answers that echo a key", () => {
  test("a revised_prompt that echoes an account's key (of any account, whole or in part) is redacted", async () => {
    const { engine, job } = build();
    fake.setRevisedPrompt(`a red fox for ${KEY_A}, also ${KEY_B.slice(0, 12)} and ${KEY_B.slice(-9)}`);
    const img = await engine.generate(job());
    expect(img.revisedPrompt).toBe("a red fox for [redacted], also [redacted] and [redacted]");
  });

  test("chat content that echoes an account's key is redacted; other key-looking words stay", async () => {
    const { registry, talk } = build();
    const out = await registry.chatEngine(talk)!.chat({
      model: talk,
      messages: [{ role: "user", content: `mine is ${KEY_A.slice(3, 20)}, an example is sk-example-0000000000` }],
      params: {},
      signal: new AbortController().signal,
    });
    expect(out.content).toBe("echo: mine is [redacted], an example is sk-example-0000000000");
  });
});

describe("faults", () => {
  test("429 with retry-after on A: served by B, A cools down for the stated time", async () => {
    const { engine, job, pool } = build();
    fake.queueFaults(KEY_A, { kind: "429", retryAfter: "7" });
    const before = Date.now();
    const img = await engine.generate(job());
    const after = Date.now();
    // A fresh pool with equal weights asks A first.
    expect(fake.received.map((r) => r.account)).toEqual([KEY_A, KEY_B]);
    expect(img.trace).toMatchObject({ accountId: "b", attempts: 2 });
    const snap = pool.snapshot().find((s) => s.accountId === "a")!;
    const stated = 7000;
    expect(snap.state).toBe("cooling");
    expect(snap.coolingUntil!).toBeGreaterThanOrEqual(before + stated);
    expect(snap.coolingUntil!).toBeLessThanOrEqual(after + stated);
  });

  test("every account 429: UpstreamRateLimited with the earliest recovery", async () => {
    const { engine, job } = build();
    fake.alwaysFault(KEY_A, { kind: "429", retryAfter: "30" });
    fake.alwaysFault(KEY_B, { kind: "429", retryAfterMs: "4000" });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRateLimited);
    expect(err.retryAfterMs).toBeGreaterThan(3000);
    expect(err.retryAfterMs).toBeLessThanOrEqual(4000);
  });

  for (const fault of [
    { kind: "status", status: 500 },
    { kind: "hang" },
    { kind: "malformed" },
    { kind: "reset" },
    { kind: "not-image" },
  ] as const) {
    test(`${fault.kind === "status" ? "500" : fault.kind} on one account ends in success through the other`, async () => {
      const { engine, job } = build();
      fake.queueFaults(KEY_A, fault);
      const img = await engine.generate(job());
      expect(img.trace).toMatchObject({ accountId: "b", attempts: 2 });
      expect(fake.received.map((r) => r.account)).toEqual([KEY_A, KEY_B]);
      expect(readPng(img.bytes).width).toBe(48);
    });
  }

  test("every attempt fails: UpstreamFailed after max_attempts; every attempt a hang: EngineTimeout", async () => {
    const { engine, job } = build();
    fake.alwaysFault(KEY_A, { kind: "status", status: 503 });
    fake.alwaysFault(KEY_B, { kind: "status", status: 502 });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(fake.received).toHaveLength(3);
    expect(err.trace).toMatchObject({ upstreamId: "oa", attempts: 3 });

    const hung = build("max_attempts = 2");
    fake.reset();
    fake.alwaysFault(KEY_A, { kind: "hang" });
    fake.alwaysFault(KEY_B, { kind: "hang" });
    const timeout = await hung.engine.generate(hung.job()).catch((e) => e);
    expect(timeout).toBeInstanceOf(EngineTimeout);
  });

  test("401 disables the account; its requests go to the other; keys never in logs or errors", async () => {
    const { engine, job, store, logs, pool } = build();
    fake.alwaysFault(KEY_A, { kind: "status", status: 401, message: `Incorrect API key provided: ${KEY_A}` });
    fake.queueFaults(KEY_B, { kind: "status", status: 401, message: `Incorrect API key provided: ${KEY_B}` });
    // Whichever is asked first, B's single 401 and A's permanent one leave... both disabled:
    const err = await engine.generate(job()).catch((e) => e);
    const disabled = await store.upstreams.disabledAccounts("oa");
    expect(disabled.has("a")).toBe(true);
    expect(disabled.has("b")).toBe(true);
    expect(err.name).toBe("UpstreamUnavailable");
    for (const text of [...logs, err.message, ...[...disabled.values()].map((d) => d.reason), JSON.stringify(pool.snapshot())]) {
      expect(text).not.toContain(KEY_A);
      expect(text).not.toContain(KEY_B);
    }
    expect(logs.some((l) => l.includes("disabled") && l.includes('"account":"a"'))).toBe(true);
    // Re-enable B (as core/upstreamAccounts' enable does in this process: the flag, then the pool's
    // refresh; another process's enable is seen through the store's data_version): it serves again, A stays out.
    await store.upstreams.enableAccount("oa", "b");
    await pool.refresh();
    const img = await engine.generate(job());
    expect(img.trace!.accountId).toBe("b");
  });

  test("upstream 400: UpstreamRejected with the upstream's message, secrets redacted, no retry", async () => {
    const { engine, job } = build();
    const msg = `Your request was rejected by the safety system. (key ${KEY_A}, header Bearer ${KEY_B})`;
    fake.alwaysFault(KEY_A, { kind: "status", status: 400, message: msg });
    fake.alwaysFault(KEY_B, { kind: "status", status: 400, message: msg });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(err.message).toContain("Your request was rejected by the safety system.");
    expect(err.message).not.toContain(KEY_A);
    expect(err.message).not.toContain(KEY_B);
    expect(fake.received).toHaveLength(1);
  });

  test("under a burst no account sees more concurrent requests than its max_concurrency", async () => {
    const { engine, job } = build();
    fake.setLatency(30);
    const results = await Promise.all(Array.from({ length: 15 }, () => engine.generate(job())));
    expect(results).toHaveLength(15);
    expect(fake.maxConcurrent.get(KEY_A)).toBe(2);
    expect(fake.maxConcurrent.get(KEY_B)).toBe(1);
  });
});

describe("streamed jobs (partial images)", () => {
  const partialsOf = (reports: ProgressReport[]) => reports.flatMap((r) => (r.partial ? [r.partial] : []));
  const listen = () => {
    const reports: ProgressReport[] = [];
    return { reports, onProgress: (r: ProgressReport) => reports.push(r) };
  };

  test("generation: stream and partial_images go upstream; its partial_image events become partials, its completed event the image", async () => {
    const { engine, job } = build();
    const { reports, onProgress } = listen();
    const img = await engine.generate(job({ partialImages: 2, onProgress }));
    const r = fake.received[0]!;
    expect(r.json).toEqual({ model: "gpt-image-up", prompt: "a red fox", n: 1, size: "48x32", stream: true, partial_images: 2 });
    const partials = partialsOf(reports);
    expect(partials).toHaveLength(2);
    partials.forEach((p, k) => {
      expect(p).toMatchObject({ mime: "image/png", width: 48, height: 32 });
      expect(Array.from(readPng(p.bytes).data.subarray(0, 4))).toEqual(FAKE_PARTIAL_COLOR(k));
    });
    expect(img).toMatchObject({ mime: "image/png", width: 48, height: 32, revisedPrompt: "a red fox", trace: { attempts: 1 } });
    expect(readPng(img.bytes).data[4]).toBe(1); // the gradient, not a partial's flat colour
  });

  test("edit: multipart with stream=true and partial_images; image_edit.* events are read the same way", async () => {
    const { engine, job } = build();
    fake.setEventGapMs(5);
    const { reports, onProgress } = listen();
    const img = await engine.edit(job({ images: [input(16, 16)], partialImages: 1, onProgress }));
    expect(fake.received[0]!.fields).toMatchObject({ stream: ["true"], partial_images: ["1"] });
    expect(partialsOf(reports)).toHaveLength(1);
    expect(img.width).toBe(48);
  });

  test("without partials nothing is streamed: the plain request, only the image", async () => {
    const { engine, job } = build();
    const { reports, onProgress } = listen();
    await engine.generate(job({ partialImages: 0, onProgress }));
    expect(fake.received[0]!.json).not.toHaveProperty("stream");
    expect(partialsOf(reports)).toHaveLength(0);
  });

  test("an upstream that ignores stream (answers JSON) gives the image and no partials", async () => {
    const { engine, job } = build();
    fake.setStreamMode("json");
    const { reports, onProgress } = listen();
    const img = await engine.generate(job({ partialImages: 3, onProgress }));
    expect(fake.received).toHaveLength(1);
    expect(partialsOf(reports)).toHaveLength(0);
    expect(img.width).toBe(48);
  });

  test("an upstream that refuses stream (400) is asked once more without it, on the same attempt", async () => {
    const { engine, job } = build();
    fake.setStreamMode("reject");
    const img = await engine.generate(job({ partialImages: 2, onProgress: () => {} }));
    expect(fake.received.map((r) => r.json?.stream ?? null)).toEqual([true, null]);
    expect(img.trace).toMatchObject({ attempts: 1 });
  });

  test("an error event mid-stream fails the attempt (redacted), and the next account's stream succeeds", async () => {
    const { engine, job, logs } = build();
    fake.queueFaults(KEY_A, { kind: "stream-error", message: `boom with ${KEY_A}` });
    fake.queueFaults(KEY_B, { kind: "stream-error", message: `boom with ${KEY_A}` });
    const { reports, onProgress } = listen();
    const img = await engine.generate(job({ partialImages: 2, onProgress }));
    expect(img.trace!.attempts).toBe(3);
    // One partial from each failed attempt, then the third attempt's: never more than asked per attempt.
    expect(partialsOf(reports).length).toBeGreaterThanOrEqual(2);
    expect(logs.join("\n")).not.toContain(KEY_A);
  });

  test("every attempt ends in an error event: UpstreamFailed naming the upstream's message", async () => {
    const { engine, job } = build("max_attempts = 2");
    fake.alwaysFault(KEY_A, { kind: "stream-error", message: "the GPU caught fire" });
    fake.alwaysFault(KEY_B, { kind: "stream-error", message: "the GPU caught fire" });
    const err = await engine.generate(job({ partialImages: 1, onProgress: () => {} })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect((err as Error).message).toContain("the GPU caught fire");
  });
});

describe("reading server-sent events", () => {
  const parse = async (text: string | string[], limits = { maxEventChars: 1000, maxTotalBytes: 10_000 }) => {
    const chunks = (Array.isArray(text) ? text : [text]).map((t) => new TextEncoder().encode(t));
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (const chunk of chunks) c.enqueue(chunk);
        c.close();
      },
    });
    const out: ServerSentEvent[] = [];
    for await (const e of readServerSentEvents(new Response(body), limits, { signal: new AbortController().signal, redactor: new SecretRedactor([]) })) out.push(e);
    return out;
  };

  test("LF, CRLF and CR line ends, comments, multi-line data, a value's one leading space, lines split across chunks", async () => {
    expect(await parse(": hi\nevent: a\ndata: 1\ndata:2\n\nevent:b\r\ndata:  x\r\n\r\ndata: y\r\rdata: z")).toEqual([
      { event: "a", data: "1\n2" },
      { event: "b", data: " x" },
      { event: "message", data: "y" },
    ]);
    expect(await parse(["event: a\r", "\ndata: {\"k\":", "1}\r", "\n\r\n"])).toEqual([{ event: "a", data: '{"k":1}' }]);
  });

  test("an event or a line over maxEventChars, and a body over maxTotalBytes, fail the attempt", async () => {
    await expect(parse(`data: ${"x".repeat(2000)}\n\n`)).rejects.toBeInstanceOf(AttemptFailure);
    await expect(parse(`data: ${"x".repeat(2000)}`)).rejects.toBeInstanceOf(AttemptFailure);
    await expect(parse(Array(30).fill(`data: ${"x".repeat(500)}\n\n`))).rejects.toBeInstanceOf(AttemptFailure);
  });
});

describe("image usage", () => {
  test("a well-formed usage object passes with its counts only; a malformed one is left out", async () => {
    const { parseImageUsage } = await import("../../src/engines/openai/parse");
    const details = { input_tokens_details: { text_tokens: 10, image_tokens: 40 } };
    expect(parseImageUsage({ total_tokens: 100, input_tokens: 50, output_tokens: 50, ...details, extra: "dropped" })).toEqual({ total_tokens: 100, input_tokens: 50, output_tokens: 50, ...details });
    const withOutput = { total_tokens: 3, input_tokens: 1, output_tokens: 2, ...details, output_tokens_details: { text_tokens: 0, image_tokens: 2 } };
    expect(parseImageUsage(withOutput)).toEqual(withOutput);
    for (const bad of [undefined, null, "lots", { total_tokens: 1 }, { total_tokens: 1, input_tokens: -1, output_tokens: 2, ...details }, { total_tokens: 1, input_tokens: 1, output_tokens: "2", ...details }, { total_tokens: 1.5, input_tokens: 1, output_tokens: 2, ...details }, { total_tokens: 3, input_tokens: 1, output_tokens: 2 }]) {
      expect(parseImageUsage(bad)).toBeUndefined();
    }
  });
});

describe("tool calls in a whole chat answer", () => {
  const answer = (call: Record<string, unknown>) => ({ choices: [{ message: { role: "assistant", content: null, tool_calls: [call] }, finish_reason: "tool_calls" }] });

  test("a missing, empty or non-text id is replaced by one of ours; an empty function name fails the attempt", async () => {
    const { parseChatAnswer } = await import("../../src/engines/openai/parse");
    const fn = { name: "lookup", arguments: "{}" };
    expect(parseChatAnswer(answer({ id: "call_up", type: "function", function: fn })).toolCalls![0]!.id).toBe("call_up");
    const made = [undefined, null, "", 7].map((id) => parseChatAnswer(answer({ id, type: "function", function: fn })).toolCalls![0]!.id);
    for (const id of made) expect(id).toMatch(/^call_[0-9A-Za-z]{24}$/);
    expect(new Set(made).size).toBe(made.length);
    expect(() => parseChatAnswer(answer({ id: "call_up", type: "function", function: { name: "", arguments: "{}" } }))).toThrow(AttemptFailure);
  });
});
