/**
 * Issue 9, decompression bombs, against a real listening server: the interlaced 64x64 PNG whose
 * IDAT inflates to 1 GiB of zeros (a 1 MB upload) as a reference image, an edit image, a mask
 * and an upstream's answer. Each is refused (400, or a refunded 502 for the upstream), never
 * charged, and the server's memory barely moves (it grew by about 2 GB before the fix). The
 * server runs in this process, so process RSS, sampled while the request runs, is its RSS.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Server } from "bun";
import { dataUrl, makePng } from "../support/images";
import { interlacedZerosBomb, progressiveScanJpeg } from "../support/imageBombs";
import { startTestServer, type TestServer } from "../support/server";

const MiB = 1024 * 1024;
/** Growth allowed while a bomb is refused: the 1 MB upload, its base64, buffers, a worker. */
const RSS_GROWTH_LIMIT = 200 * MiB;

const bomb = interlacedZerosBomb();
let server: TestServer;
let upstream: Server<undefined>;

beforeAll(async () => {
  // An OpenAI-compatible upstream whose every image is the bomb.
  upstream = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: () => Response.json({ created: 1, data: [{ b64_json: Buffer.from(bomb).toString("base64") }] }),
  });
  server = await startTestServer({
    toml: `
[server]
log_requests = false

[[upstreams]]
id = "bomber"
kind = "openai"
base_url = "http://127.0.0.1:${upstream.port}/v1"
timeout_ms = 5000
accounts = [ { id = "a1", api_key = "sk-bomber-0000000000000000000001", max_concurrency = 1 } ]

[[models]]
id = "bomb-image"
kind = "image"
upstream = "bomber"
upstream_model = "gpt-image-1"
`,
  });
});

afterAll(async () => {
  await server.close();
  await upstream.stop(true);
});

/** Runs `send` and reports the peak RSS growth seen meanwhile (sampled every 2 ms). */
async function peakGrowth<T>(send: () => Promise<T>): Promise<{ result: T; growth: number }> {
  Bun.gc(true);
  const before = process.memoryUsage().rss;
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 2);
  try {
    const result = await send();
    peak = Math.max(peak, process.memoryUsage().rss);
    return { result, growth: peak - before };
  } finally {
    clearInterval(sampler);
  }
}

function postJson(path: string, key: string, body: unknown) {
  return fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

function postForm(path: string, key: string, parts: [string, string | Uint8Array][]) {
  const form = new FormData();
  for (const [name, value] of parts) {
    if (typeof value === "string") form.append(name, value);
    else form.append(name, new Blob([value as Uint8Array<ArrayBuffer>], { type: "image/png" }), `${name}.png`);
  }
  return fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form });
}

interface ApiErrorBody {
  error: { param: string | null; code: string | null; message: string };
}

describe("the interlaced 1 GiB-of-zeros PNG", () => {
  const opaque64 = makePng(64, 64, (x, y) => [x * 4, y * 4, 50, 255]);

  const cases: { name: string; send: (key: string) => Promise<Response>; param: string }[] = [
    {
      name: "as a generations reference image",
      send: (key) => postJson("/v1/images/generations", key, { prompt: "x", size: "64x64", reference_images: [dataUrl(bomb)] }),
      param: "reference_images[0]",
    },
    {
      name: "as an edit image (multipart)",
      send: (key) => postForm("/v1/images/edits", key, [["prompt", "x"], ["image", bomb]]),
      param: "image",
    },
    {
      name: "as an edit image (JSON)",
      send: (key) => postJson("/v1/images/edits", key, { prompt: "x", images: [{ image_url: dataUrl(opaque64) }, { image_url: dataUrl(bomb) }] }),
      param: "images[1]",
    },
    {
      name: "as a mask (it has alpha and the image's size, so only a full decode can tell)",
      send: (key) => postForm("/v1/images/edits", key, [["prompt", "x"], ["image", opaque64], ["mask", bomb]]),
      param: "mask",
    },
  ];

  for (const c of cases) {
    test(`${c.name}: 400 invalid_image naming the field, not charged, RSS bounded`, async () => {
      const u = await server.userWithKey({ credits: 2 });
      const { result: res, growth } = await peakGrowth(() => c.send(u.key));
      expect(res.status).toBe(400);
      const body = (await res.json()) as ApiErrorBody;
      expect(body.error.code).toBe("invalid_image");
      expect(body.error.param).toBe(c.param);
      expect(body.error.message).toContain("inflates to more than the 16504 bytes its header allows");
      expect(await server.balance(u.userId)).toBe(2);
      expect(growth).toBeLessThan(RSS_GROWTH_LIMIT);
    });
  }

  test("as an upstream's answer: 502 invalid_engine_output, the credit refunded, RSS bounded", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const { result: res, growth } = await peakGrowth(() => postJson("/v1/images/generations", u.key, { model: "bomb-image", prompt: "x", size: "1024x1024" }));
    expect(res.status).toBe(502);
    const body = (await res.json()) as ApiErrorBody;
    expect(body.error.code).toBe("invalid_engine_output");
    // The client gets a plain message; what the engine's output did wrong is for the operator.
    expect(body.error.message).not.toContain("inflates");
    expect(await server.balance(u.userId)).toBe(2);
    const failed = () => server.logs.filter((l) => l.includes('"image request failed"') && l.includes("inflates to more than the 16504 bytes its header allows"));
    for (let i = 0; i < 100 && failed().length === 0; i++) await Bun.sleep(20);
    expect(failed()).toHaveLength(1);
    const record = (await server.services.store.requests.list({ userId: u.userId, limit: 1 }))[0]!;
    expect(record).toMatchObject({ status: "failed", error_code: "invalid_engine_output" });
    expect(`${record.error_message} ${server.logs.join("\n")}`).toContain("inflates to more than the 16504 bytes its header allows");
    expect(growth).toBeLessThan(RSS_GROWTH_LIMIT);
  });

  test("the server answers other requests while bombs are refused, and still generates afterwards", async () => {
    const u = await server.userWithKey({ credits: 3 });
    const bombs = [1, 2, 3].map(() => postJson("/v1/images/generations", u.key, { prompt: "x", size: "64x64", reference_images: [dataUrl(bomb)] }));
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    for (const r of await Promise.all(bombs)) expect(r.status).toBe(400);
    const ok = await postJson("/v1/images/generations", u.key, { prompt: "x", size: "64x64", reference_images: [dataUrl(opaque64)] });
    expect(ok.status).toBe(200);
    expect(await server.balance(u.userId)).toBe(2);
  });
});

test("a progressive JPEG of 20,000 near-empty scans over 36 megapixels is refused as a reference image, not decoded for minutes", async () => {
  const u = await server.userWithKey({ credits: 1 });
  const jpeg = progressiveScanJpeg(6000, 6000, 20_000);
  const res = await postJson("/v1/images/generations", u.key, { prompt: "x", size: "64x64", reference_image: dataUrl(jpeg, "jpeg") });
  expect(res.status).toBe(400);
  const body = (await res.json()) as ApiErrorBody;
  expect(body.error).toMatchObject({ code: "invalid_image", param: "reference_image" });
  expect(body.error.message).toContain("more than 100 scans");
  expect(await server.balance(u.userId)).toBe(1);
});
