/**
 * The `gemini` engine against a fake Gemini API on loopback (test/support/fakeUpstreams.ts
 * startFakeGemini): what arrives upstream (x-goog-api-key, parts, generationConfig), the size
 * mapping, answers read back, safety refusals, and every pool fault. The last block runs a real
 * server and drives it with the official `openai` client.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI, { APIError, toFile } from "openai";
import type { Config } from "../../src/config";
import { ModelCatalog } from "../../src/core/models";
import { EngineRegistry } from "../../src/engines/registry";
import { UpstreamFailed, UpstreamRateLimited, UpstreamRejected, type ImageInput, type ImageJob } from "../../src/core/engine";
import { registerUpstreamEngines } from "../../src/engines/upstreams";
import { imageConfigFor } from "../../src/engines/gemini/translate";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { fakeClock } from "../support/fakeClock";
import { startFakeGemini } from "../support/fakeUpstreams";
import { makePng, readPng } from "../support/images";
import { configFromToml, startTestServer, type TestServer } from "../support/server";

const KEY_A = "AIzaSy-test-account-a-0123456789abcdef";
const KEY_B = "AIzaSy-test-account-b-fedcba9876543210";

const fake = startFakeGemini();
afterAll(() => fake.stop());

function toml(extra = "", accounts = `{ id = "a", api_key = "${KEY_A}", max_concurrency = 2 }, { id = "b", api_key = "${KEY_B}", max_concurrency = 1 }`) {
  return `
[limits]
queue_timeout_ms = 5000
generation_timeout_ms = 5000

[[upstreams]]
id = "gem"
kind = "gemini"
base_url = "${fake.url}"
timeout_ms = 2000
${extra}
accounts = [ ${accounts} ]

[[models]]
id = "banana"
kind = "image"
upstream = "gem"
upstream_model = "gemini-2.5-flash-image"
`;
}

function build(extra = "", accounts?: string, clock: () => number = Date.now) {
  const config: Config = configFromToml(toml(extra, accounts));
  const store = createStore(openDatabase(":memory:"), latestVersion());
  const registry = new EngineRegistry();
  const logs: string[] = [];
  const pools = registerUpstreamEngines(config, registry, { store: store.upstreams, clock, logger: createLogger((l) => logs.push(l)) });
  const model = new ModelCatalog(config).get("banana")!;
  const engine = registry.imageEngine(model)!;
  const job = (over: Partial<ImageJob> = {}): ImageJob => ({
    model,
    prompt: "a nano banana",
    size: { width: 1024, height: 1024 },
    quality: "auto",
    images: [],
    extra: {},
    signal: new AbortController().signal,
    ...over,
  });
  return { store, engine, job, logs, pool: pools.get("gem")! };
}

function input(width: number, height: number): ImageInput {
  return { bytes: makePng(width, height, (x) => [x * 10, 50, 60, 255]), mime: "image/png", width, height };
}

beforeEach(() => fake.reset());

describe("requests arriving upstream", () => {
  test("generation: generateContent with x-goog-api-key, the prompt as a text part, IMAGE modality, imageConfig", async () => {
    const { engine, job } = build();
    const img = await engine.generate(job({ size: { width: 3072, height: 2048 } }));
    expect(fake.received).toHaveLength(1);
    const r = fake.received[0]!;
    expect(r.path).toBe("/v1beta/models/gemini-2.5-flash-image:generateContent");
    expect(r.authorization).toBeNull();
    expect([KEY_A, KEY_B]).toContain(r.googApiKey!);
    expect(r.json).toEqual({
      contents: [{ role: "user", parts: [{ text: "a nano banana" }] }],
      generationConfig: { responseModalities: ["TEXT", "IMAGE"], imageConfig: { aspectRatio: "3:2", imageSize: "2K" } },
    });
    // The fake draws 16·a × 16·b, doubled for 2K.
    expect(img).toMatchObject({ mime: "image/png", width: 96, height: 64, revisedPrompt: "a nano banana" });
    expect(img.trace).toMatchObject({ upstreamId: "gem", attempts: 1 });
  });

  test("auto size sends no imageConfig; the candidate's text part becomes the revised prompt", async () => {
    const { engine, job } = build();
    fake.setRevisedPrompt("Here is a banana wearing sunglasses.");
    const img = await engine.generate(job({ size: null }));
    expect(fake.received[0]!.json!.generationConfig).toEqual({ responseModalities: ["TEXT", "IMAGE"] });
    expect(img.revisedPrompt).toBe("Here is a banana wearing sunglasses.");
  });

  test("references go as inline_data parts after the prompt", async () => {
    const { engine, job } = build();
    const refs = [input(20, 20), input(30, 10)];
    await engine.generate(job({ images: refs }));
    const parts = (fake.received[0]!.json!.contents as { parts: Record<string, unknown>[] }[])[0]!.parts;
    expect(parts).toEqual([
      { text: "a nano banana" },
      { inline_data: { mime_type: "image/png", data: Buffer.from(refs[0]!.bytes).toString("base64") } },
      { inline_data: { mime_type: "image/png", data: Buffer.from(refs[1]!.bytes).toString("base64") } },
    ]);
  });

  test("edit without a mask: the image as inline_data; with auto size the output keeps its shape", async () => {
    const { engine, job } = build();
    const base = input(40, 24);
    const img = await engine.edit(job({ images: [base], size: null, prompt: "make it night" }));
    const parts = (fake.received[0]!.json!.contents as { parts: Record<string, unknown>[] }[])[0]!.parts;
    expect(parts[0]).toEqual({ text: "make it night" });
    expect(parts[1]).toEqual({ inline_data: { mime_type: "image/png", data: Buffer.from(base.bytes).toString("base64") } });
    expect(readPng(img.bytes)).toMatchObject({ width: 40, height: 24 });
  });

  test("edit with a mask: inputProblem names the model and the mask; the engine never drops it silently", async () => {
    const { engine, job } = build();
    const j = job({ images: [input(16, 16)], mask: input(16, 16) });
    const problem = engine.inputProblem!(j, "edit");
    expect(problem).toMatchObject({ image: "mask" });
    expect(problem!.message).toContain("'banana'");
    expect(engine.inputProblem!(job({ images: [input(16, 16)] }), "edit")).toBeNull();
    expect(engine.inputProblem!(job(), "generate")).toBeNull();
    const err = await engine.edit(j).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(fake.received).toHaveLength(0);
  });
});

describe("size → imageConfig", () => {
  const table: [number, number, string, string | undefined][] = [
    [1024, 1024, "1:1", undefined],
    [512, 512, "1:1", undefined],
    [1536, 1024, "3:2", undefined],
    [1024, 1536, "2:3", undefined],
    [1792, 1024, "16:9", undefined],
    [1024, 1792, "9:16", undefined],
    [1344, 768, "16:9", undefined],
    [1200, 896, "4:3", undefined],
    [896, 1200, "3:4", undefined],
    [1136, 896, "5:4", undefined],
    [896, 1136, "4:5", undefined],
    [1584, 672, "21:9", undefined],
    [2752, 1536, "16:9", "2K"],
    [3000, 1000, "21:9", "2K"],
    [1000, 3000, "9:16", "2K"],
    [2048, 2048, "1:1", "2K"],
    [4096, 4096, "1:1", "4K"],
    [5504, 3072, "16:9", "4K"],
    [1447, 1447, "1:1", undefined],
    [1448, 1448, "1:1", "2K"],
    [2895, 2895, "1:1", "2K"],
    [2896, 2896, "1:1", "4K"],
  ];
  for (const [w, h, ratio, tier] of table) {
    test(`${w}x${h} → ${ratio}${tier ? ` ${tier}` : " (1K, not sent)"}`, () => {
      expect(imageConfigFor({ width: w, height: h })).toEqual(tier ? { aspectRatio: ratio as never, imageSize: tier as never } : { aspectRatio: ratio as never });
    });
  }
  test("auto → none", () => expect(imageConfigFor(null)).toBeNull());
});

describe("refusals and faults", () => {
  test("finishReason SAFETY-class: UpstreamRejected with the reason (redacted), no retry", async () => {
    const { engine, job } = build();
    fake.alwaysFault(KEY_A, { kind: "variant", name: "safety", message: `blocked for account ${KEY_A}` });
    fake.alwaysFault(KEY_B, { kind: "variant", name: "safety", message: `blocked for account ${KEY_B}` });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(err.message).toContain("IMAGE_SAFETY");
    expect(err.message).not.toContain(KEY_A);
    expect(err.message).not.toContain(KEY_B);
    expect(fake.received).toHaveLength(1);
  });

  test("a blocked prompt (promptFeedback.blockReason): UpstreamRejected naming the reason", async () => {
    const { engine, job } = build();
    fake.alwaysFault(KEY_A, { kind: "variant", name: "blocked" });
    fake.alwaysFault(KEY_B, { kind: "variant", name: "blocked" });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(err.message).toContain("the prompt was blocked (SAFETY)");
    expect(fake.received).toHaveLength(1);
  });

  test("a 200 without an image is a failed attempt, served by the other account", async () => {
    const { engine, job } = build();
    fake.queueFaults(KEY_A, { kind: "variant", name: "no-image" });
    const img = await engine.generate(job());
    expect(fake.received.map((r) => r.account)).toEqual([KEY_A, KEY_B]);
    expect(img.trace).toMatchObject({ accountId: "b", attempts: 2 });
    const always = build("max_attempts = 2");
    fake.reset();
    fake.alwaysFault(KEY_A, { kind: "variant", name: "no-image" });
    fake.alwaysFault(KEY_B, { kind: "variant", name: "no-image" });
    const err = await always.engine.generate(always.job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(err.message).toContain("no image");
  });

  test("403, and Gemini's 400 'API key not valid', disable the account; keys never in logs or errors", async () => {
    const { engine, job, store, logs, pool } = build();
    fake.alwaysFault(KEY_A, { kind: "status", status: 403, message: `Permission denied for ${KEY_A}` });
    fake.alwaysFault(KEY_B, { kind: "status", status: 400, message: `API key not valid. Please pass a valid API key. (${KEY_B})` });
    const err = await engine.generate(job()).catch((e) => e);
    const disabled = await store.upstreams.disabledAccounts("gem");
    expect(disabled.has("a")).toBe(true);
    expect(disabled.has("b")).toBe(true);
    expect(err.name).toBe("UpstreamUnavailable");
    for (const text of [...logs, err.message, ...[...disabled.values()].map((d) => d.reason), JSON.stringify(pool.snapshot())]) {
      expect(text).not.toContain(KEY_A);
      expect(text).not.toContain(KEY_B);
    }
  });

  test("401 disables the account and the other serves", async () => {
    const { engine, job, store } = build();
    fake.alwaysFault(KEY_A, { kind: "status", status: 401, message: "unauthenticated" });
    const img = await engine.generate(job());
    expect(img.trace!.accountId).toBe("b");
    expect((await store.upstreams.disabledAccounts("gem")).has("a")).toBe(true);
  });

  test("upstream 400 INVALID_ARGUMENT: UpstreamRejected with its message, redacted, no retry; 500 retried elsewhere", async () => {
    const { engine, job } = build();
    fake.alwaysFault(KEY_A, { kind: "status", status: 400, message: `Unsupported image (key ${KEY_A})` });
    fake.alwaysFault(KEY_B, { kind: "status", status: 400, message: `Unsupported image (key ${KEY_B})` });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(err.message).toContain("Unsupported image");
    expect(err.message).not.toContain(KEY_A);
    expect(err.message).not.toContain(KEY_B);
    expect(fake.received).toHaveLength(1);
    fake.reset();
    fake.queueFaults(KEY_A, { kind: "status", status: 500 });
    const ok = await build().engine.generate(job());
    expect(ok.trace).toMatchObject({ accountId: "b", attempts: 2 });
  });

  test("a revised prompt echoing a key is redacted", async () => {
    const { engine, job } = build();
    fake.setRevisedPrompt(`done with ${KEY_A}`);
    const img = await engine.generate(job());
    expect(img.revisedPrompt).not.toContain(KEY_A);
  });

  test("config: a chat model naming a gemini upstream is a startup error", () => {
    expect(() => configFromToml(`${toml()}\n[[models]]\nid = "talk"\nkind = "chat"\nupstream = "gem"\n`)).toThrow(/gemini upstream, which serves image models only/);
  });
});

describe("429 RESOURCE_EXHAUSTED: the delay Gemini names in the body (RetryInfo), not in a header", () => {
  const cooling = (pool: ReturnType<typeof build>["pool"], account: string, now: number) => (pool.snapshot().find((s) => s.accountId === account)!.coolingUntil ?? now) - now;

  test("the fake answers as Gemini does: no Retry-After, RetryInfo.retryDelay among the details", async () => {
    fake.queueFaults(KEY_A, { kind: "429", retryDelay: "37s" });
    const res = await fetch(`${fake.url}/v1beta/models/gemini-2.5-flash-image:generateContent`, {
      method: "POST",
      headers: { "x-goog-api-key": KEY_A, "content-type": "application/json" },
      body: JSON.stringify({ contents: [{ parts: [{ text: "x" }] }], generationConfig: { responseModalities: ["IMAGE"] } }),
    });
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBeNull();
    expect(res.headers.get("retry-after-ms")).toBeNull();
    const body = (await res.json()) as { error: { code: number; status: string; details: Record<string, unknown>[] } };
    expect(body.error).toMatchObject({ code: 429, status: "RESOURCE_EXHAUSTED" });
    expect(body.error.details).toContainEqual({ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "37s" });
  });

  test("the account rests for the delay Gemini named: the other serves, and goes on serving until it has passed", async () => {
    const clock = fakeClock();
    const { engine, job, pool } = build("", undefined, clock.now);
    const t0 = clock.now();
    fake.queueFaults(KEY_A, { kind: "429", retryDelay: "37s" });
    const img = await engine.generate(job());
    expect(img.trace).toMatchObject({ accountId: "b", attempts: 2 });
    expect(cooling(pool, "a", t0)).toBe(37_000);
    // Past the pool's own 429 backoff (1 s, 2 s…), still within Gemini's 37 s: only b is asked.
    clock.advance(30_000);
    for (let i = 0; i < 3; i++) expect((await engine.generate(job())).trace!.accountId).toBe("b");
    clock.advance(7_001);
    const accounts = new Set<string>();
    for (let i = 0; i < 3; i++) accounts.add((await engine.generate(job())).trace!.accountId!);
    expect(accounts.has("a")).toBe(true);
    expect(fake.received.map((r) => r.account).slice(0, 5)).toEqual([KEY_A, KEY_B, KEY_B, KEY_B, KEY_B]);
  });

  test("every account rate limited: UpstreamRateLimited after the earliest delay named", async () => {
    const clock = fakeClock();
    const { engine, job } = build("", undefined, clock.now);
    fake.alwaysFault(KEY_A, { kind: "429", retryDelay: "37s" });
    fake.alwaysFault(KEY_B, { kind: "429", retryDelay: "20.5s" });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRateLimited);
    expect(err.retryAfterMs).toBe(20_500);
  });

  // Cooldown after one 429 on a fresh account, with rate_limit_cooldown_max_ms = 45 s: the pool's
  // own first backoff is 1 s, so a row expecting 1000 means "no usable hint".
  const rows: [string, Extract<Parameters<typeof fake.queueFaults>[1], { kind: "429" }>, number][] = [
    ["whole seconds", { kind: "429", retryDelay: "37s" }, 37_000],
    ["fractional seconds, rounded up to the ms", { kind: "429", retryDelay: "1.5s" }, 1_500],
    ["nine fractional digits (as Gemini sends them)", { kind: "429", retryDelay: "12.000000001s" }, 12_001],
    ["zero", { kind: "429", retryDelay: "0s" }, 0],
    ["a daily quota's long delay is capped at rate_limit_cooldown_max_ms", { kind: "429", retryDelay: "51820.638305887s" }, 45_000],
    ["no RetryInfo at all: the pool's backoff", { kind: "429" }, 1_000],
    ["negative: ignored", { kind: "429", retryDelay: "-5s" }, 1_000],
    ["no unit: ignored", { kind: "429", retryDelay: "37" }, 1_000],
    ["another unit: ignored", { kind: "429", retryDelay: "37ms" }, 1_000],
    ["an exponent: ignored", { kind: "429", retryDelay: "1e3s" }, 1_000],
    ["spaces: ignored", { kind: "429", retryDelay: " 37s" }, 1_000],
    ["ten fractional digits: ignored", { kind: "429", retryDelay: "1.0000000001s" }, 1_000],
    ["more seconds than a Duration holds: ignored", { kind: "429", retryDelay: "9999999999999s" }, 1_000],
    ["the protobuf object form, not its JSON mapping: ignored", { kind: "429", retryDelay: { seconds: 37 } }, 1_000],
    ["garbage, with a Retry-After header: the header", { kind: "429", retryDelay: "soon", retryAfter: "7" }, 7_000],
    ["no RetryInfo, with a retry-after-ms header: the header", { kind: "429", retryAfterMs: "2500" }, 2_500],
    ["RetryInfo and a header: Gemini's own word", { kind: "429", retryDelay: "37s", retryAfter: "7" }, 37_000],
  ];
  for (const [name, fault, expected] of rows) {
    test(`retryDelay: ${name} → ${expected} ms`, async () => {
      const clock = fakeClock();
      const { engine, job, pool } = build("rate_limit_cooldown_max_ms = 45000", undefined, clock.now);
      fake.queueFaults(KEY_A, fault);
      await engine.generate(job());
      expect(fake.received.map((r) => r.account)).toEqual([KEY_A, KEY_B]);
      expect(cooling(pool, "a", clock.now())).toBe(expected);
    });
  }
});

describe("through a real server with the official openai client", () => {
  let server: TestServer;
  const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });

  test("generation, edit without a mask, edit with a mask (400, not charged), a safety refusal and a blocked prompt (400 upstream_rejected, refunded)", async () => {
    server = await startTestServer({ toml: toml() });
    try {
      const { userId, key } = await server.userWithKey({ credits: 10 });
      const oa = client(key);
      const gen = await oa.images.generate({ model: "banana", prompt: "a banana", size: "1536x1024" });
      const png = readPng(Buffer.from(gen.data![0]!.b64_json!, "base64"));
      expect(png).toMatchObject({ width: 48, height: 32 });
      expect(fake.received.at(-1)!.json!.generationConfig).toEqual({ responseModalities: ["TEXT", "IMAGE"], imageConfig: { aspectRatio: "3:2" } });
      expect(await server.balance(userId)).toBe(9);

      const base = makePng(32, 32, () => [200, 100, 50, 255]);
      const edit = await oa.images.edit({ model: "banana", prompt: "make it blue", image: await toFile(base, "base.png", { type: "image/png" }) });
      expect(edit.data![0]!.b64_json).toBeTruthy();
      expect(await server.balance(userId)).toBe(8);

      const sent = fake.received.length;
      const masked = await oa.images
        .edit({
          model: "banana",
          prompt: "make it blue",
          image: await toFile(base, "base.png", { type: "image/png" }),
          mask: await toFile(makePng(32, 32, (x) => [0, 0, 0, x < 16 ? 0 : 255]), "mask.png", { type: "image/png" }),
        })
        .catch((e) => e);
      expect(masked).toBeInstanceOf(APIError);
      expect(masked.status).toBe(400);
      expect(masked.message).toContain("banana");
      expect(masked.message).toContain("mask");
      expect(fake.received.length).toBe(sent);
      expect(await server.balance(userId)).toBe(8);

      fake.alwaysFault(KEY_A, { kind: "variant", name: "safety" });
      fake.alwaysFault(KEY_B, { kind: "variant", name: "safety" });
      const refused = await oa.images.generate({ model: "banana", prompt: "something refused", size: "1024x1024" }).catch((e) => e);
      expect(refused).toBeInstanceOf(APIError);
      expect(refused.status).toBe(400);
      expect(refused.code).toBe("upstream_rejected");
      expect(refused.message).toContain("IMAGE_SAFETY");
      expect(await server.balance(userId)).toBe(8);

      fake.alwaysFault(KEY_A, { kind: "variant", name: "blocked" });
      fake.alwaysFault(KEY_B, { kind: "variant", name: "blocked" });
      const blocked = await oa.images.generate({ model: "banana", prompt: "something blocked", size: "1024x1024" }).catch((e) => e);
      expect(blocked.status).toBe(400);
      expect(blocked.code).toBe("upstream_rejected");
      expect(blocked.message).toContain("the prompt was blocked (SAFETY)");
      expect(await server.balance(userId)).toBe(8);
      for (const line of server.logs) {
        expect(line).not.toContain(KEY_A);
        expect(line).not.toContain(KEY_B);
      }
    } finally {
      await server.close();
    }
  });
  test("every account out of quota: 429 upstream_rate_limited to the client, Retry-After the delay Gemini named, refunded", async () => {
    server = await startTestServer({ toml: toml() });
    try {
      const { userId, key } = await server.userWithKey({ credits: 10 });
      fake.alwaysFault(KEY_A, { kind: "429", retryDelay: "37s" });
      fake.alwaysFault(KEY_B, { kind: "429", retryDelay: "20s" });
      const err = await client(key).images.generate({ model: "banana", prompt: "a banana", size: "1024x1024" }).catch((e) => e);
      expect(err).toBeInstanceOf(APIError);
      expect(err.status).toBe(429);
      expect(err.code).toBe("upstream_rate_limited");
      expect(err.headers.get("retry-after")).toBe("20");
      expect(Number(err.headers.get("retry-after-ms"))).toBeGreaterThan(15_000);
      expect(Number(err.headers.get("retry-after-ms"))).toBeLessThanOrEqual(20_000);
      expect(await server.balance(userId)).toBe(10);
    } finally {
      await server.close();
    }
  });
});
