/**
 * /v1/images/* end to end on a real listening server with the built-in engine: the official
 * openai client (generate, edit with one file, an array sent as image[], a mask), the JSON edit
 * form and reference images through fetch, decoded results, and every bad input → 400 with the
 * right param and no charge. A thin recording wrapper around the real engine shows what the
 * engine received.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI, { toFile } from "openai";
import jpeg from "jpeg-js";
import type { ImageEngine, ImageJob } from "../../src/core/engine";
import { startTestServer, type TestServer } from "../support/server";
import { dataUrl, makePng, readPng } from "../support/images";

let server: TestServer;
const jobs: ImageJob[] = [];

/** Records every job, then hands it to the engine the server registered (the real builtin one). */
function recording(inner: ImageEngine): ImageEngine {
  return {
    generate: (job) => (jobs.push(job), inner.generate(job)),
    edit: (job) => (jobs.push(job), inner.edit(job)),
    inputProblem: inner.inputProblem?.bind(inner),
  };
}

beforeAll(async () => {
  server = await startTestServer({
    config: (c) => {
      c.server.log_requests = false;
    },
    customize: (s) => {
      const builtin = s.engines.imageEngine(s.catalog.get("builtin-image")!);
      if (!builtin) throw new Error("the built-in image engine is not registered");
      s.engines.registerBuiltinImage(recording(builtin));
    },
  });
});

afterAll(async () => {
  await server.close();
});

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });

/** A deterministic, non-uniform picture so "unchanged" means something. */
const pattern = (x: number, y: number): [number, number, number, number] => [(x * 37) % 256, (y * 53) % 256, ((x + y) * 11) % 256, 255];

function decodeB64(b64: string) {
  expect(b64.startsWith("data:")).toBe(false);
  return readPng(new Uint8Array(Buffer.from(b64, "base64")));
}

describe("with the official openai client", () => {
  test("images.generate returns a real PNG of the requested size and costs 1 credit", async () => {
    const u = await server.userWithKey({ credits: 5 });
    const res = await client(u.key).images.generate({ model: "builtin-image", prompt: "a lighthouse at dusk", size: "256x128" as "1024x1024", response_format: "b64_json" });
    expect(res.data).toHaveLength(1);
    const img = decodeB64(res.data![0]!.b64_json!);
    expect([img.width, img.height]).toEqual([256, 128]);
    const raw = res as unknown as { size: string; output_format: string; generation_time_ms: number; created: number };
    expect(raw.size).toBe("256x128");
    expect(raw.output_format).toBe("png");
    expect(raw.generation_time_ms).toBeGreaterThanOrEqual(0);
    expect(typeof res.data![0]!.revised_prompt).toBe("string");
    expect(await server.balance(u.userId)).toBe(4);
  });

  test("the default model is used when none is named", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const res = await client(u.key).images.generate({ prompt: "a cat", size: "64x64" as "1024x1024" });
    expect(decodeB64(res.data![0]!.b64_json!).width).toBe(64);
    expect(jobs.at(-1)!.model.id).toBe("builtin-image");
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("fields the openai types allow to be null (model, n, size, quality, background…) count as absent", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const res = await client(u.key).images.generate({
      prompt: "a cat",
      size: "64x64" as "1024x1024",
      model: null,
      n: null,
      quality: null,
      background: null,
      moderation: null,
      output_compression: null,
      output_format: null,
      style: null,
      stream: null,
    });
    expect(decodeB64(res.data![0]!.b64_json!).width).toBe(64);
    expect(jobs.at(-1)!.model.id).toBe("builtin-image");
    expect(jobs.at(-1)!.extra).toEqual({});
    const edit = await post("/v1/images/edits", u.key, { prompt: "snow", model: null, size: null, mask: null, user: null, images: [{ image_url: dataUrl(makePng(64, 64, pattern)) }] });
    expect(edit.status).toBe(200);
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("stream: true answers OpenAI's server-sent events (test/e2e/imageStream.test.ts has the rest)", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const stream = await client(u.key).images.generate({ prompt: "a cat", size: "64x64" as "1024x1024", stream: true });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types).toEqual(["image_generation.completed"]);
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("images.edit with one file", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const file = await toFile(makePng(96, 64, pattern), "photo.png", { type: "image/png" });
    const res = await client(u.key).images.edit({ model: "builtin-image", image: file, prompt: "make it autumn" });
    const img = decodeB64(res.data![0]!.b64_json!);
    expect([img.width, img.height]).toEqual([96, 64]);
    expect(jobs.at(-1)!.images).toHaveLength(1);
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("images.edit with an array of files (sent as image[]); part content types are sniffed, not trusted", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const jpg = jpeg.encode({ width: 40, height: 30, data: Buffer.from(new Uint8Array(40 * 30 * 4).fill(180)) }, 90).data;
    const files = [
      await toFile(makePng(64, 64, pattern), "a.png", { type: "application/octet-stream" }),
      await toFile(new Uint8Array(jpg), "b.bin", { type: "image/png" }),
    ];
    const res = await client(u.key).images.edit({ model: "builtin-image", image: files, prompt: "combine them" });
    const img = decodeB64(res.data![0]!.b64_json!);
    // The built-in engine keeps the first image's size on edits; the response reports it.
    expect([img.width, img.height]).toEqual([64, 64]);
    expect((res as unknown as { size: string }).size).toBe("64x64");
    const job = jobs.at(-1)!;
    expect(job.images.map((i) => [i.mime, i.width, i.height])).toEqual([["image/png", 64, 64], ["image/jpeg", 40, 30]]);
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("images.edit with a mask repaints only the transparent area", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const W = 80, H = 60;
    const base = makePng(W, H, pattern);
    // Transparent (repaint) in the left half, opaque (keep) in the right half.
    const mask = makePng(W, H, (x) => [0, 0, 0, x < W / 2 ? 0 : 255]);
    const res = await client(u.key).images.edit({
      model: "builtin-image",
      image: await toFile(base, "base.png", { type: "image/png" }),
      mask: await toFile(mask, "mask.png", { type: "image/png" }),
      prompt: "a bright sun",
    });
    const out = decodeB64(res.data![0]!.b64_json!);
    expect([out.width, out.height]).toEqual([W, H]);
    const input = readPng(base);
    let kept = 0, changed = 0;
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W; x++) {
        const i = (y * W + x) * 4;
        const same = [0, 1, 2, 3].every((c) => out.data[i + c] === input.data[i + c]);
        if (x >= W / 2) {
          if (!same) throw new Error(`pixel (${x},${y}) outside the mask changed`);
          kept++;
        } else if (!same) changed++;
      }
    }
    expect(kept).toBe((W / 2) * H);
    expect(changed).toBeGreaterThan(0);
    expect(await server.balance(u.userId)).toBe(0);
  });
});

function post(path: string, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

describe("through fetch", () => {
  test("the JSON edit form with a mask", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const base = makePng(64, 48, pattern);
    const mask = makePng(64, 48, (x, y) => [0, 0, 0, y < 24 ? 0 : 255]);
    const res = await post("/v1/images/edits", u.key, { prompt: "snow", images: [{ image_url: dataUrl(base) }], mask: { image_url: dataUrl(mask) } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { b64_json: string }[]; size: string };
    expect(body.size).toBe("64x48");
    const out = decodeB64(body.data[0]!.b64_json);
    const input = readPng(base);
    // The opaque bottom half is untouched.
    expect(out.data.subarray(64 * 24 * 4)).toEqual(input.data.subarray(64 * 24 * 4));
    expect(jobs.at(-1)!.mask?.width).toBe(64);
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("reference images (PNG and JPEG, declared as jpg) reach the engine; OpenAI's extra fields pass through, unknown ones are ignored", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const jpg = new Uint8Array(jpeg.encode({ width: 20, height: 10, data: Buffer.from(new Uint8Array(800).fill(90)) }, 80).data);
    const res = await post("/v1/images/generations", u.key, {
      prompt: "a collage",
      size: "128x96",
      reference_images: [dataUrl(makePng(32, 32, pattern)), dataUrl(jpg, "jpg")],
      style: "vivid",
      user: "end-user-7",
      something_new: true,
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { b64_json: string }[] };
    expect(decodeB64(body.data[0]!.b64_json).height).toBe(96);
    const job = jobs.at(-1)!;
    expect(job.images.map((i) => i.mime)).toEqual(["image/png", "image/jpeg"]);
    expect(job.extra).toEqual({ style: "vivid", user: "end-user-7" });
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("a chunked multipart upload without Content-Length works", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const form = new FormData();
    form.append("prompt", "chunked");
    form.append("image", new Blob([makePng(64, 64, pattern)]), "x.png");
    const encoded = new Response(form);
    const contentType = encoded.headers.get("content-type")!;
    const bytes = new Uint8Array(await encoded.arrayBuffer());
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < bytes.length; i += 1000) c.enqueue(bytes.slice(i, i + 1000));
        c.close();
      },
    });
    const res = await fetch(`${server.url}/v1/images/edits`, { method: "POST", headers: { authorization: `Bearer ${u.key}`, "content-type": contentType }, body: stream });
    expect(res.status).toBe(200);
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("one credit, eight concurrent generations and edits: exactly one succeeds, the rest are 402 without retry, the balance never goes negative", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        post(i % 2 ? "/v1/images/generations" : "/v1/images/edits", u.key, i % 2 ? { prompt: "race", size: "64x64" } : { prompt: "race", images: [{ image_url: dataUrl(makePng(64, 64, pattern)) }] }).then(async (r) => ({
          status: r.status,
          retry: r.headers.get("x-should-retry"),
          code: r.status === 200 ? null : ((await r.json()) as { error: { code: string } }).error.code,
        })),
      ),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
    expect(results.filter((r) => r.status !== 200)).toEqual(Array(7).fill({ status: 402, retry: "false", code: "insufficient_credits" }));
    const credits = server.services.store.credits;
    expect(await credits.balance(u.userId)).toBe(0);
    expect(await credits.ledgerSum(u.userId)).toBe(0);
    expect(await server.services.store.requests.count({ userId: u.userId })).toBe(1);
  });

  test("the 32000-character prompt limit counts characters, not UTF-16 units (32000 emoji pass, 32001 fail)", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const ok = await post("/v1/images/generations", u.key, { prompt: "🎨".repeat(32000), size: "64x64" });
    expect(ok.status).toBe(200);
    expect(jobs.at(-1)!.prompt).toBe("🎨".repeat(32000));
    const over = await post("/v1/images/generations", u.key, { prompt: "🎨".repeat(32001), size: "64x64" });
    expect(over.status).toBe(400);
    expect(((await over.json()) as { error: { param: string } }).error.param).toBe("prompt");
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("indexed image parts (image[0], image[1], as qs-style form encoders send a list) are accepted in index order", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const form = new FormData();
    form.append("prompt", "indexed");
    form.append("image[1]", new Blob([makePng(32, 32, pattern)]), "b.png");
    form.append("image[0]", new Blob([makePng(64, 48, pattern)]), "a.png");
    const res = await fetch(`${server.url}/v1/images/edits`, { method: "POST", headers: { authorization: `Bearer ${u.key}` }, body: form });
    expect(res.status).toBe(200);
    expect(jobs.at(-1)!.images.map((i) => `${i.width}x${i.height}`)).toEqual(["64x48", "32x32"]);
    expect(((await res.json()) as { size: string }).size).toBe("64x48");
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("a response_format other than b64_json or url is a 400 that costs nothing (url: see imageUrls.test.ts)", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const res = await post("/v1/images/generations", u.key, { prompt: "x", response_format: "png" });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { param: string; code: string; message: string } };
    expect(body.error.param).toBe("response_format");
    expect(await server.balance(u.userId)).toBe(1);
  });
});

// ---- every bad input: 400 (or 404/415) with the right param, never charged ----------------

const png64 = makePng(64, 64, pattern);
const okUrl = dataUrl(png64);
// A valid signature and IHDR over pixel data cut short: only a full decode finds it.
const truncatedPng = png64.subarray(0, png64.byteLength - 40);
const tooBig = `data:image/png;base64,${"A".repeat(Math.ceil((10 * 1024 * 1024 + 3) / 3) * 4)}`;

type Case = { name: string; body: unknown; status?: number; param: string | null; code?: string; path?: string; contentType?: string };

const generationCases: Case[] = [
  { name: "missing prompt", body: { size: "64x64" }, param: "prompt", code: "missing_required_parameter" },
  { name: "empty prompt", body: { prompt: "" }, param: "prompt" },
  { name: "prompt over 32000 characters", body: { prompt: "x".repeat(32001) }, param: "prompt" },
  { name: "prompt not a string", body: { prompt: 5 }, param: "prompt" },
  { name: "unknown model", body: { prompt: "x", model: "no-such-model" }, status: 404, param: "model", code: "model_not_found" },
  { name: "a chat model", body: { prompt: "x", model: "builtin-chat" }, param: "model", code: "model_not_image" },
  { name: "size not WxH", body: { prompt: "x", size: "large" }, param: "size" },
  { name: "size below 64", body: { prompt: "x", size: "32x64" }, param: "size" },
  { name: "size above 2048", body: { prompt: "x", size: "64x4096" }, param: "size" },
  { name: "quality outside the enum", body: { prompt: "x", quality: "ultra" }, param: "quality" },
  { name: "n = 2", body: { prompt: "x", n: 2 }, param: "n" },
  { name: "response_format png", body: { prompt: "x", response_format: "png" }, param: "response_format" },
  { name: "both reference fields", body: { prompt: "x", reference_image: okUrl, reference_images: [okUrl] }, param: "reference_image" },
  { name: "11 reference images", body: { prompt: "x", reference_images: Array(11).fill(okUrl) }, param: "reference_images" },
  { name: "reference image neither a data URL nor http(s)", body: { prompt: "x", reference_image: "ftp://example.com/a.png" }, param: "reference_image", code: "invalid_image_url" },
  { name: "invalid base64", body: { prompt: "x", reference_images: [okUrl, "data:image/png;base64,iVBOR%%%"] }, param: "reference_images[1]", code: "invalid_base64" },
  { name: "unpadded base64", body: { prompt: "x", reference_images: [okUrl, okUrl, okUrl, okUrl.replace(/=+$/, "") + "A"] }, param: "reference_images[3]", code: "invalid_base64" },
  { name: "GIF type", body: { prompt: "x", reference_images: ["data:image/gif;base64,R0lGODlhAQABAAAAACw="] }, param: "reference_images[0]", code: "invalid_image_format" },
  { name: "bytes are not an image", body: { prompt: "x", reference_image: `data:image/png;base64,${Buffer.from("hello, not an image").toString("base64")}` }, param: "reference_image", code: "invalid_image_format" },
  { name: "declared JPEG, bytes PNG", body: { prompt: "x", reference_images: [okUrl.replace("image/png", "image/jpeg")] }, param: "reference_images[0]", code: "image_type_mismatch" },
  { name: "over 10 MiB decoded (checked before decoding)", body: { prompt: "x", reference_image: tooBig }, param: "reference_image", code: "image_too_large" },
  { name: "header fine, pixel data truncated", body: { prompt: "x", reference_images: [okUrl, dataUrl(truncatedPng)] }, param: "reference_images[1]", code: "invalid_image" },
  { name: "output_compression over 100", body: { prompt: "x", output_compression: 101 }, param: "output_compression" },
  { name: "a JSON array", body: [{ prompt: "x" }], param: null },
  { name: "malformed JSON", body: "{\"prompt\":", param: null, code: "invalid_json" },
  { name: "text/plain", body: "prompt=x", status: 415, param: null, contentType: "text/plain" },
  { name: "partial_images over 3", body: { prompt: "x", stream: true, partial_images: 4 }, param: "partial_images" },
  { name: "partial_images not an integer", body: { prompt: "x", stream: true, partial_images: 1.5 }, param: "partial_images" },
  { name: "stream not a boolean", body: { prompt: "x", stream: "yes" }, param: "stream" },
  { name: "empty model id (not \"no image model is configured\")", body: { prompt: "x", model: "" }, param: "model", code: "invalid_value" },
  { name: "prompt null", body: { prompt: null }, param: "prompt", code: "missing_required_parameter" },
];

const editJsonCases: Case[] = [
  { name: "JSON edit without images", body: { prompt: "x" }, param: "images", code: "missing_required_parameter" },
  { name: "JSON edit with an empty list", body: { prompt: "x", images: [] }, param: "images" },
  { name: "JSON edit with a bad second image", body: { prompt: "x", images: [{ image_url: okUrl }, { image_url: "data:image/webp;base64,AAAA" }] }, param: "images[1]" },
  { name: "JSON edit with 17 images", body: { prompt: "x", images: Array(17).fill({ image_url: okUrl }) }, param: "images" },
  { name: "JSON edit mask of another size", body: { prompt: "x", images: [{ image_url: okUrl }], mask: { image_url: dataUrl(makePng(32, 32, () => [0, 0, 0, 0])) } }, param: "mask", code: "invalid_mask" },
  { name: "JSON edit with partial_images -1", body: { prompt: "x", stream: true, partial_images: -1, images: [{ image_url: okUrl }] }, param: "partial_images" },
  { name: "JSON edit with images null", body: { prompt: "x", images: null }, param: "images", code: "missing_required_parameter" },
  { name: "JSON edit base wider than builtin-image edits (refused before the charge)", body: { prompt: "x", images: [{ image_url: dataUrl(makePng(2049, 16)) }] }, param: "images[0]", code: "image_not_supported" },
  { name: "JSON edit mask without alpha", body: { prompt: "x", images: [{ image_url: okUrl }], mask: { image_url: dataUrl(makePng(64, 64, pattern, false)) } }, param: "mask", code: "invalid_mask" },
];

describe("bad input is refused with the right param and never charged", () => {
  const cases = [...generationCases.map((c) => ({ ...c, path: "/v1/images/generations" })), ...editJsonCases.map((c) => ({ ...c, path: "/v1/images/edits" }))];
  for (const c of cases) {
    test(`${c.path.split("/").pop()}: ${c.name}`, async () => {
      const u = await server.userWithKey({ credits: 3 });
      const res = await post(c.path, u.key, c.body, c.contentType ? { "content-type": c.contentType } : {});
      expect(res.status).toBe(c.status ?? 400);
      const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
      expect(body.error.param).toBe(c.param);
      if (c.code) expect(body.error.code).toBe(c.code);
      expect(body.error.message.length).toBeGreaterThan(10);
      expect(await server.balance(u.userId)).toBe(3);
      expect(await server.services.store.requests.count({ userId: u.userId })).toBe(0);
    });
  }

  const jpg = new Uint8Array(jpeg.encode({ width: 64, height: 64, data: Buffer.from(new Uint8Array(64 * 64 * 4).fill(50)) }, 80).data);
  const multipartCases: { name: string; parts: [string, string | Blob, string?][]; param: string; code?: string }[] = [
    { name: "no image", parts: [["prompt", "x"]], param: "image" },
    { name: "image taller than builtin-image edits", parts: [["prompt", "x"], ["image", new Blob([makePng(16, 2049)]), "tall.png"]], param: "image", code: "image_not_supported" },
    { name: "image[] with truncated pixel data", parts: [["prompt", "x"], ["image[]", new Blob([png64]), "a.png"], ["image[]", new Blob([truncatedPng]), "b.png"]], param: "image[1]", code: "invalid_image" },
    { name: "image is not an image", parts: [["prompt", "x"], ["image", new Blob(["just text"]), "a.png"]], param: "image", code: "invalid_image_format" },
    { name: "second image[] is bad", parts: [["prompt", "x"], ["image[]", new Blob([png64]), "a.png"], ["image[]", new Blob(["nope"]), "b.png"]], param: "image[1]" },
    { name: "image as a text field", parts: [["prompt", "x"], ["image", "not a file"]], param: "image" },
    { name: "missing prompt", parts: [["image", new Blob([png64]), "a.png"]], param: "prompt" },
    { name: "n = 2", parts: [["prompt", "x"], ["n", "2"], ["image", new Blob([png64]), "a.png"]], param: "n" },
    { name: "bad size", parts: [["prompt", "x"], ["size", "9x9"], ["image", new Blob([png64]), "a.png"]], param: "size" },
    { name: "mask is a JPEG", parts: [["prompt", "x"], ["image", new Blob([png64]), "a.png"], ["mask", new Blob([jpg]), "m.png"]], param: "mask", code: "invalid_mask" },
    { name: "mask without alpha", parts: [["prompt", "x"], ["image", new Blob([png64]), "a.png"], ["mask", new Blob([makePng(64, 64, pattern, false)]), "m.png"]], param: "mask", code: "invalid_mask" },
    { name: "mask of another size", parts: [["prompt", "x"], ["image", new Blob([png64]), "a.png"], ["mask", new Blob([makePng(64, 32, () => [0, 0, 0, 0])]), "m.png"]], param: "mask", code: "invalid_mask" },
    { name: "17 images", parts: [["prompt", "x"], ...Array.from({ length: 17 }, () => ["image[]", new Blob([png64]), "a.png"] as [string, Blob, string])], param: "image", code: "too_many_images" },
    { name: "unknown model", parts: [["prompt", "x"], ["model", "nope"], ["image", new Blob([png64]), "a.png"]], param: "model", code: "model_not_found" },
    { name: "stream=true with partial_images=9", parts: [["prompt", "x"], ["stream", "true"], ["partial_images", "9"], ["image", new Blob([png64]), "a.png"]], param: "partial_images" },
    { name: "empty model field", parts: [["prompt", "x"], ["model", ""], ["image", new Blob([png64]), "a.png"]], param: "model", code: "invalid_value" },
  ];
  for (const c of multipartCases) {
    test(`edits (multipart): ${c.name}`, async () => {
      const u = await server.userWithKey({ credits: 3 });
      const form = new FormData();
      for (const [k, v, filename] of c.parts) {
        if (typeof v === "string") form.append(k, v);
        else form.append(k, v, filename);
      }
      const res = await fetch(`${server.url}/v1/images/edits`, { method: "POST", headers: { authorization: `Bearer ${u.key}` }, body: form });
      expect(res.status).toBe(c.code === "model_not_found" ? 404 : 400);
      const body = (await res.json()) as { error: { param: string | null; code: string | null } };
      expect(body.error.param).toBe(c.param);
      if (c.code) expect(body.error.code).toBe(c.code);
      expect(await server.balance(u.userId)).toBe(3);
      expect(await server.services.store.requests.count({ userId: u.userId })).toBe(0);
    });
  }

  test("no key: 401, nothing recorded", async () => {
    const res = await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "x" }) });
    expect(res.status).toBe(401);
  });
});

describe("the OpenAPI document", () => {
  test("describes both endpoints with request bodies, 200 and error responses", async () => {
    const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { tags: string[]; requestBody: { content: Record<string, unknown> }; responses: Record<string, unknown> }>>;
      components: { schemas: Record<string, unknown> };
    };
    const gen = doc.paths["/v1/images/generations"]!.post!;
    expect(gen.tags).toEqual(["Images"]);
    expect(Object.keys(gen.requestBody.content)).toEqual(["application/json"]);
    for (const s of ["200", "400", "401", "402", "404", "413", "415", "429", "502"]) expect(gen.responses[s]).toBeDefined();
    const edit = doc.paths["/v1/images/edits"]!.post!;
    expect(Object.keys(edit.requestBody.content).sort()).toEqual(["application/json", "multipart/form-data"]);
    for (const name of ["ImageGenerationRequest", "ImageEditJsonRequest", "ImageEditMultipartRequest", "ImageResponse"]) expect(doc.components.schemas[name]).toBeDefined();
  });
});

