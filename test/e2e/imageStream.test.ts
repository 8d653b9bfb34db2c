/**
 * Streamed image answers (`stream: true`, `partial_images`) end to end on a real listening
 * server with the official openai client: OpenAI's own events from builtin-image (real partial
 * PNGs), from a fake OpenAI upstream that streams (and one that does not), from a fake WebUI's
 * progress previews, and for edits; an error event after the charge with its refund; the
 * usual JSON errors before the charge; the heartbeat comment; and a client that drops the
 * stream while the generation finishes and is recorded.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI, { toFile } from "openai";
import { loadConfig } from "../../src/config";
import { UpstreamFailed, type ImageEngine, type ImageJob } from "../../src/core/engine";
import { FAKE_IMAGE_USAGE, FAKE_PARTIAL_COLOR, startFakeOpenAI, startFakeWebUI } from "../support/fakeUpstreams";
import { makePng, readPng } from "../support/images";
import { until } from "../support/until";
import { startTestServer, type TestServer } from "../support/server";

const UPSTREAM_KEY = "sk-upstream-stream-test-0123456789";
const HEARTBEAT_MS = 40;

const fakeOpenAI = startFakeOpenAI();
const fakeWebUI = startFakeWebUI();
let server: TestServer;

/**
 * The real builtin engine, with behaviours a prompt can ask for: `[slow]` waits 300 ms before
 * drawing, `[fail]` shows one partial and then fails (after the charge), `[bad-partial]` first
 * reports partials that are not what they claim (the stream must skip them).
 */
function scripted(inner: ImageEngine): ImageEngine {
  const wrap = (run: (job: ImageJob) => Promise<import("../../src/core/engine").GeneratedImage>) => async (job: ImageJob) => {
    if (job.prompt.includes("[slow]")) await Bun.sleep(300);
    if (job.prompt.includes("[bad-partial]")) {
      const png = makePng(8, 8);
      job.onProgress?.({ partial: { bytes: new TextEncoder().encode("not an image at all"), mime: "image/png", width: 8, height: 8 } });
      job.onProgress?.({ partial: { bytes: png, mime: "image/png", width: 9, height: 8 } });
      job.onProgress?.({ partial: { bytes: png, mime: "image/jpeg", width: 8, height: 8 } });
    }
    if (job.prompt.includes("[fail]")) {
      job.onProgress?.({ fraction: 0.3, partial: { bytes: makePng(16, 16), mime: "image/png", width: 16, height: 16 } });
      await Bun.sleep(20);
      throw new UpstreamFailed("the scripted engine broke down");
    }
    return run(job);
  };
  return { generate: wrap((j) => inner.generate(j)), edit: wrap((j) => inner.edit(j)), inputProblem: inner.inputProblem?.bind(inner) };
}

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
log_requests = false
stream_heartbeat_ms = ${HEARTBEAT_MS}

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${fakeOpenAI.url}/v1"
max_attempts = 1
accounts = [{ id = "main", api_key = "${UPSTREAM_KEY}" }]

[[upstreams]]
id = "sd"
kind = "sdwebui"
base_url = "${fakeWebUI.url}"
accounts = [{ id = "gpu" }]

[[models]]
id = "oa-image"
kind = "image"
upstream = "oa"
upstream_model = "gpt-image-1"

[[models]]
id = "sd-image"
kind = "image"
upstream = "sd"
`,
    customize: (s) => {
      const builtin = s.engines.imageEngine(s.catalog.get("builtin-image")!);
      if (!builtin) throw new Error("the built-in image engine is not registered");
      s.engines.registerBuiltinImage(scripted(builtin));
    },
  });
});

afterAll(async () => {
  await server.close();
  await fakeOpenAI.stop();
  await fakeWebUI.stop();
});

beforeEach(() => {
  fakeOpenAI.reset();
  fakeWebUI.reset();
});

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
const requestsOf = async (userId: number) => await server.services.store.requests.list({ userId, limit: 100 });

type AnyEvent = { type: string; b64_json: string; partial_image_index?: number; size: string; quality: string; background: string; output_format: string; created_at: number; generation_time_ms?: number };

async function collect(stream: AsyncIterable<unknown>): Promise<AnyEvent[]> {
  const events: AnyEvent[] = [];
  for await (const e of stream) events.push(e as AnyEvent);
  return events;
}

const decode = (b64: string) => readPng(new Uint8Array(Buffer.from(b64, "base64")));

describe("generations with the official client", () => {
  test("builtin-image, partial_images 2: two partial PNGs, coarse to fine, then the completed image, which is the non-streamed one; 1 credit", async () => {
    const u = await server.userWithKey({ credits: 3 });
    const before = Math.floor(Date.now() / 1000);
    const stream = await client(u.key).images.generate({ model: "builtin-image", prompt: "a lighthouse at dusk", size: "96x64" as "1024x1024", stream: true, partial_images: 2 });
    const events = await collect(stream);
    expect(events.map((e) => e.type)).toEqual(["image_generation.partial_image", "image_generation.partial_image", "image_generation.completed"]);
    expect(events.slice(0, 2).map((e) => e.partial_image_index)).toEqual([0, 1]);
    for (const e of events) {
      expect(e).toMatchObject({ size: "96x64", quality: "auto", background: "auto", output_format: "png" });
      expect(e.created_at).toBeGreaterThanOrEqual(before);
      expect(e.b64_json.startsWith("data:")).toBe(false);
      expect(decode(e.b64_json)).toMatchObject({ width: 96, height: 64 });
    }
    const completed = events[2]!;
    expect(completed.generation_time_ms).toBeGreaterThanOrEqual(0);
    // The kept image's id, as in the JSON answer.
    expect((completed as { image_id?: string }).image_id).toMatch(/^img_/);
    expect(events[0]).not.toHaveProperty("generation_time_ms");
    // An engine that counts no tokens: no usage rather than made-up counts.
    expect(completed).not.toHaveProperty("usage");
    // The partials are real intermediate pictures: different from each other and from the final one.
    expect(new Set(events.map((e) => e.b64_json)).size).toBe(3);

    const plain = await client(u.key).images.generate({ model: "builtin-image", prompt: "a lighthouse at dusk", size: "96x64" as "1024x1024" });
    expect(plain.data![0]!.b64_json).toBe(completed.b64_json);
    expect(await server.balance(u.userId)).toBe(1);
    expect((await requestsOf(u.userId)).map((r) => r.status)).toEqual(["succeeded", "succeeded"]);
  });

  test("partial_images 0 (or absent) sends only the completed event; background is echoed", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const none = await collect(await client(u.key).images.generate({ prompt: "snowy mountains", size: "64x64" as "1024x1024", stream: true, partial_images: 0 }));
    expect(none.map((e) => e.type)).toEqual(["image_generation.completed"]);
    const absent = await collect(await client(u.key).images.generate({ prompt: "snowy mountains", size: "64x64" as "1024x1024", stream: true, background: "transparent", quality: "low" }));
    expect(absent).toHaveLength(1);
    expect(absent[0]).toMatchObject({ type: "image_generation.completed", background: "transparent", quality: "low" });
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("a fake OpenAI upstream that streams: its two partials pass through, then its completed image", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const events = await collect(await client(u.key).images.generate({ model: "oa-image", prompt: "a red fox", size: "1024x1024", stream: true, partial_images: 2 }));
    expect(events.map((e) => e.type)).toEqual(["image_generation.partial_image", "image_generation.partial_image", "image_generation.completed"]);
    events.slice(0, 2).forEach((e, k) => {
      expect(e.partial_image_index).toBe(k);
      const img = decode(e.b64_json);
      expect([img.width, img.height]).toEqual([1024, 1024]);
      expect(Array.from(img.data.subarray(0, 4))).toEqual(FAKE_PARTIAL_COLOR(k));
    });
    expect(decode(events[2]!.b64_json).width).toBe(1024);
    // The upstream's token usage, which openai-node's ImageGenCompletedEvent has.
    expect((events[2] as OpenAI.Images.ImageGenCompletedEvent).usage).toEqual(FAKE_IMAGE_USAGE);
    expect(fakeOpenAI.received[0]!.json).toMatchObject({ model: "gpt-image-1", stream: true, partial_images: 2 });
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("an upstream that does not stream: only the completed event", async () => {
    fakeOpenAI.setStreamMode("json");
    const u = await server.userWithKey({ credits: 1 });
    const events = await collect(await client(u.key).images.generate({ model: "oa-image", prompt: "a red fox", size: "256x256" as "1024x1024", stream: true, partial_images: 3 }));
    expect(events.map((e) => e.type)).toEqual(["image_generation.completed"]);
    expect(decode(events[0]!.b64_json).width).toBe(256);
    expect((events[0] as OpenAI.Images.ImageGenCompletedEvent).usage).toEqual(FAKE_IMAGE_USAGE);
  });

  test("a Stable Diffusion WebUI: its progress previews arrive as partials", async () => {
    fakeWebUI.setProgressSteps(3);
    const u = await server.userWithKey({ credits: 1 });
    const events = await collect(await client(u.key).images.generate({ model: "sd-image", prompt: "a castle", size: "64x64" as "1024x1024", stream: true, partial_images: 1 }));
    expect(events.map((e) => e.type)).toEqual(["image_generation.partial_image", "image_generation.completed"]);
    expect(decode(events[0]!.b64_json).width).toBe(64);
  });

  test("partials that are not what they claim are skipped; the numbering has no gaps", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const events = await collect(await client(u.key).images.generate({ prompt: "[bad-partial] a bay", size: "64x64" as "1024x1024", stream: true, partial_images: 1 }));
    expect(events.map((e) => [e.type, e.partial_image_index])).toEqual([
      ["image_generation.partial_image", 0],
      ["image_generation.completed", undefined],
    ]);
    expect(decode(events[0]!.b64_json).width).toBe(64);
  });
});

describe("edits with the official client", () => {
  test("images.edit({ stream: true, partial_images: 1 }): image_edit.partial_image then image_edit.completed, at the input's size", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const png = makePng(80, 48, (x, y) => [x * 3, y * 5, 90, 255]);
    const stream = await client(u.key).images.edit({ image: await toFile(png, "in.png", { type: "image/png" }), prompt: "add snow", stream: true, partial_images: 1 });
    const events = await collect(stream);
    expect(events.map((e) => e.type)).toEqual(["image_edit.partial_image", "image_edit.completed"]);
    for (const e of events) {
      expect(e.size).toBe("80x48");
      expect(decode(e.b64_json)).toMatchObject({ width: 80, height: 48 });
    }
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("an edit through the streaming upstream: image_edit events pass through", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const png = makePng(32, 32);
    const events = await collect(
      await client(u.key).images.edit({ model: "oa-image", image: await toFile(png, "in.png", { type: "image/png" }), prompt: "add snow", size: "1024x1024", stream: true, partial_images: 2 }),
    );
    expect(events.map((e) => e.type)).toEqual(["image_edit.partial_image", "image_edit.partial_image", "image_edit.completed"]);
    expect(fakeOpenAI.received[0]!.fields).toMatchObject({ stream: ["true"], partial_images: ["2"] });
  });
});

describe("failures", () => {
  test("a failure after the charge: the partial, then an error event the client raises; the credit is refunded", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const seen: string[] = [];
    const err = await (async () => {
      const stream = await client(u.key).images.generate({ prompt: "[fail] a harbour", size: "64x64" as "1024x1024", stream: true, partial_images: 2 });
      for await (const e of stream) seen.push(e.type);
    })().then(
      () => null,
      (e: unknown) => e,
    );
    expect(seen).toEqual(["image_generation.partial_image"]);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    const apiError = err as InstanceType<typeof OpenAI.APIError>;
    // The engine's own words are for admins (the log); the client gets the plain message.
    expect(apiError.message).toContain("The upstream service failed");
    expect(apiError.message).not.toContain("the scripted engine broke down");
    expect(apiError.code).toBe("upstream_error");
    expect(apiError.type).toBe("upstream_error");
    expect(await server.balance(u.userId)).toBe(1);
    expect((await requestsOf(u.userId))[0]).toMatchObject({ status: "failed", error_code: "upstream_error", credits_refunded: 1 });
  });

  test("the error event on the wire is OpenAI's: event: error, data {type: error, error: {message, type, param, code}}", async () => {
    const u = await server.userWithKey({ credits: 1 });
    fakeOpenAI.alwaysFault(UPSTREAM_KEY, { kind: "stream-error", message: `overloaded, key ${UPSTREAM_KEY}` });
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "oa-image", prompt: "a fox", stream: true, partial_images: 1 }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    const blocks = text.split("\n\n").filter((b) => b.startsWith("event:"));
    expect(blocks.map((b) => b.split("\n")[0])).toEqual(["event: image_generation.partial_image", "event: error"]);
    const error = JSON.parse(blocks[1]!.split("\n")[1]!.slice("data: ".length)) as { type: string; error: Record<string, unknown> };
    expect(error).toMatchObject({ type: "error", error: { type: "upstream_error", code: "upstream_error", param: null } });
    expect(String(error.error.message)).toContain("The upstream service failed");
    expect(String(error.error.message)).not.toContain("overloaded");
    expect(text).not.toContain(UPSTREAM_KEY);
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("before the charge the answer is the usual JSON error, not a stream: 402, 400 partial_images, 404 model", async () => {
    const broke = await server.userWithKey({ credits: 0 });
    const e402 = await client(broke.key).images.generate({ prompt: "x", size: "64x64" as "1024x1024", stream: true, partial_images: 1 }).catch((e: unknown) => e);
    expect(e402).toBeInstanceOf(OpenAI.APIError);
    expect((e402 as InstanceType<typeof OpenAI.APIError>).status).toBe(402);

    const u = await server.userWithKey({ credits: 2 });
    const post = (body: unknown) =>
      fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    const e400 = await post({ prompt: "x", stream: true, partial_images: 4 });
    expect(e400.status).toBe(400);
    expect(e400.headers.get("content-type")).toContain("application/json");
    expect(((await e400.json()) as { error: { param: string } }).error.param).toBe("partial_images");
    const e404 = await post({ prompt: "x", model: "nope", stream: true });
    expect(e404.status).toBe(404);

    const form = new FormData();
    form.append("prompt", "x");
    form.append("stream", "true");
    form.append("partial_images", "many");
    form.append("image", new Blob([makePng(64, 64)]), "a.png");
    const multipart = await fetch(`${server.url}/v1/images/edits`, { method: "POST", headers: { authorization: `Bearer ${u.key}` }, body: form });
    expect(multipart.status).toBe(400);
    expect(((await multipart.json()) as { error: { param: string } }).error.param).toBe("partial_images");

    expect(await server.balance(u.userId)).toBe(2);
    expect(await requestsOf(u.userId)).toHaveLength(0);
  });
});

describe("the connection", () => {
  test("a comment line is sent whenever the stream has been quiet for stream_heartbeat_ms (15 s by default)", async () => {
    expect(loadConfig({ env: {} }).server.stream_heartbeat_ms).toBe(15_000);
    const u = await server.userWithKey({ credits: 1 });
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "[slow] a quiet lake", size: "64x64", stream: true }),
    });
    expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    expect(res.headers.get("cache-control")).toBe("no-cache");
    const text = await res.text();
    // 300 ms of silence at a 40 ms heartbeat: several comments, each its own block, before the image.
    const beats = text.split(": keep-alive\n\n").length - 1;
    expect(beats).toBeGreaterThanOrEqual(3);
    expect(text.indexOf(": keep-alive")).toBeLessThan(text.indexOf("event: image_generation.completed"));
    expect(text.endsWith("\n\n")).toBe(true);
  });

  test("a client that drops the stream does not stop the generation: it finishes, is charged and recorded; nothing is thrown", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const controller = new AbortController();
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "[slow] a long road", size: "128x128", stream: true, partial_images: 2 }),
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    // Gone before the first event (the engine waits 300 ms first).
    controller.abort();
    await res.body?.cancel().catch(() => {});
    await until(async () => (await requestsOf(u.userId))[0]?.status === "succeeded", "the dropped generation to finish", 5000);
    expect(await server.balance(u.userId)).toBe(0);
    await server.services.background.idle();
    expect(server.logs.filter((l) => /"level":"error"/.test(l))).toEqual([]);
  });
});
