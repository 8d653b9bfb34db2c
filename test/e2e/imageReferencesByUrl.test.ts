/**
 * Image inputs given by URL, end to end: a real server fetching from an image host on loopback.
 * With `[fetch] allow_private = true` (the host is on 127.0.0.1) references and JSON edits by URL
 * work and reach the engine as bytes; the 10 MiB cap, not-an-image, 404, the time limit and the
 * redirect limit fail as 400s naming the field. Without it (the default), every server-side
 * request forgery attempt is refused before any connection, and nothing is charged.
 * (Redirects from a public host to loopback are covered with a scripted client in
 * test/core/imageFetch.test.ts: no public host is reachable from here.)
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { ImageEngine, ImageJob } from "../../src/core/engine";
import { MAX_IMAGE_BYTES } from "../../src/core/limits";
import type { Services } from "../../src/services";
import { startTestServer, type TestServer } from "../support/server";
import { makePng } from "../support/images";

const jobs: ImageJob[] = [];
const hits: string[] = [];

function recording(inner: ImageEngine): ImageEngine {
  return {
    generate: (job) => (jobs.push(job), inner.generate(job)),
    edit: (job) => (jobs.push(job), inner.edit(job)),
    inputProblem: inner.inputProblem?.bind(inner),
  };
}

const REFERENCE = makePng(40, 30, (x, y) => [x * 6, y * 8, 90, 255]);
const BASE = makePng(64, 48);
const MASK = makePng(64, 48, (_, y) => [0, 0, 0, y < 24 ? 0 : 255]);

let host: ReturnType<typeof Bun.serve>;
let open: TestServer;
let strict: TestServer;

beforeAll(async () => {
  host = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const path = new URL(req.url).pathname;
      hits.push(path);
      if (path === "/ref.png") return new Response(REFERENCE, { headers: { "content-type": "application/octet-stream" } });
      if (path === "/base.png") return new Response(BASE);
      if (path === "/mask.png") return new Response(MASK);
      if (path === "/big.png") return new Response(new Uint8Array(MAX_IMAGE_BYTES + 1));
      if (path === "/big-stream.png") {
        let sent = 0;
        return new Response(
          new ReadableStream({
            pull(c) {
              if (sent > 2 * MAX_IMAGE_BYTES) return c.close();
              const chunk = sent === 0 ? REFERENCE : new Uint8Array(1024 * 1024);
              sent += chunk.byteLength;
              c.enqueue(chunk);
            },
          }),
        );
      }
      if (path === "/page.html") return new Response("<!doctype html><p>not an image</p>", { headers: { "content-type": "image/png" } });
      if (path === "/slow.png") return new Promise<Response>(() => {});
      const hop = /^\/hop\/(\d+)$/.exec(path);
      if (hop) return Number(hop[1]) === 0 ? new Response(REFERENCE) : Response.redirect(`/hop/${Number(hop[1]) - 1}`, 302);
      return new Response("not found", { status: 404 });
    },
  });
  const customize = (s: Services) => {
    const builtin = s.engines.imageEngine(s.catalog.get("builtin-image")!)!;
    s.engines.registerBuiltinImage(recording(builtin));
  };
  open = await startTestServer({ toml: "[fetch]\nallow_private = true\ntimeout_ms = 1000\n", customize });
  strict = await startTestServer({ customize });
});

afterAll(async () => {
  await Promise.all([open?.close(), strict?.close()]);
  host?.stop(true);
});

const at = (path: string) => `http://127.0.0.1:${host.port}${path}`;

function post(server: TestServer, path: string, key: string, body: unknown) {
  return fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
}

async function refused(server: TestServer, body: Record<string, unknown>, param: string, code: string, words?: string) {
  const u = await server.userWithKey({ credits: 3 });
  const path = "images" in body ? "/v1/images/edits" : "/v1/images/generations";
  const res = await post(server, path, u.key, { prompt: "p", ...body });
  const answer = (await res.json()) as { error: { param: string; code: string; message: string } };
  expect({ status: res.status, param: answer.error.param, code: answer.error.code }).toEqual({ status: 400, param, code });
  if (words) expect(answer.error.message).toContain(words);
  expect(await server.balance(u.userId)).toBe(3);
  return answer.error;
}

describe("with [fetch] allow_private (an image host on loopback)", () => {
  test("a reference image by URL reaches the engine as its bytes, and costs 1 credit", async () => {
    const u = await open.userWithKey({ credits: 2 });
    const res = await post(open, "/v1/images/generations", u.key, { prompt: "a fox", size: "64x64", reference_images: [at("/ref.png"), at("/hop/2")] });
    expect(res.status).toBe(200);
    const job = jobs.at(-1)!;
    expect(job.images.map((i) => [i.param, i.mime, i.width, i.height])).toEqual([
      ["reference_images[0]", "image/png", 40, 30],
      ["reference_images[1]", "image/png", 40, 30],
    ]);
    expect(Buffer.from(job.images[0]!.bytes).equals(Buffer.from(REFERENCE))).toBe(true);
    expect(await open.balance(u.userId)).toBe(1);
  });

  test("a JSON edit with the image and the mask by URL", async () => {
    const u = await open.userWithKey({ credits: 1 });
    const res = await post(open, "/v1/images/edits", u.key, { prompt: "snow", images: [{ image_url: at("/base.png") }], mask: { image_url: at("/mask.png") } });
    expect(res.status).toBe(200);
    const job = jobs.at(-1)!;
    expect([job.images[0]!.width, job.mask?.width, job.mask?.param]).toEqual([64, 64, "mask"]);
    expect(await open.balance(u.userId)).toBe(0);
  });

  test("over 10 MiB (announced or streamed), not an image, 404, too slow, 4 redirects: 400 naming the field, not charged", async () => {
    await refused(open, { reference_images: [at("/ref.png"), at("/big.png")] }, "reference_images[1]", "image_too_large", `announced ${MAX_IMAGE_BYTES + 1} bytes`);
    await refused(open, { reference_image: at("/big-stream.png") }, "reference_image", "image_too_large");
    await refused(open, { reference_image: at("/page.html") }, "reference_image", "invalid_image_format");
    await refused(open, { images: [{ image_url: at("/base.png") }, { image_url: at("/missing.png") }] }, "images[1]", "image_fetch_failed", "answered HTTP 404");
    await refused(open, { images: [{ image_url: at("/base.png") }], mask: { image_url: at("/slow.png") } }, "mask", "image_fetch_failed", "within 1000 ms");
    await refused(open, { reference_image: at("/hop/4") }, "reference_image", "image_fetch_failed", "more than 3 redirects");
    await refused(open, { reference_image: "http://user:pw@127.0.0.1/x.png" }, "reference_image", "image_url_refused", "user name or password");
  });
});

describe("by default (no private addresses)", () => {
  test("loopback, 10/8, the metadata address and a name resolving to 127.0.0.1 are refused before any connection, not charged", async () => {
    const before = hits.length;
    await refused(strict, { reference_image: at("/ref.png") }, "reference_image", "image_url_refused", "127.0.0.1 is a loopback address");
    await refused(strict, { reference_images: ["http://10.0.0.1/x"] }, "reference_images[0]", "image_url_refused", "10.0.0.1 is a private address");
    await refused(strict, { reference_image: "http://169.254.169.254/latest/meta-data" }, "reference_image", "image_url_refused", "link-local");
    await refused(strict, { reference_image: `http://localhost:${host.port}/ref.png` }, "reference_image", "image_url_refused", "localhost resolves to");
    await refused(strict, { reference_image: "http://[::1]/x" }, "reference_image", "image_url_refused", "loopback");
    await refused(strict, { images: [{ image_url: `http://0x7f.1:${host.port}/base.png` }] }, "images[0]", "image_url_refused", "127.0.0.1 is a loopback address");
    expect(hits.length).toBe(before);
  });
});

describe("our own signed links", () => {
  test("are read from the store, not fetched: they work on a loopback server with private addresses refused", async () => {
    const u = await strict.userWithKey({ credits: 3 });
    const made = await (await post(strict, "/v1/images/generations", u.key, { prompt: "a source", size: "64x64", response_format: "url" })).json();
    const link = made.data[0].url as string;
    expect(new URL(link).hostname).toBe("127.0.0.1");
    jobs.length = 0;
    const res = await post(strict, "/v1/images/generations", u.key, { prompt: "guided", size: "64x64", reference_image: link });
    expect(res.status).toBe(200);
    const stored = new Uint8Array(await (await fetch(link)).arrayBuffer());
    expect(Buffer.from(jobs.at(-1)!.images[0]!.bytes).equals(Buffer.from(stored))).toBe(true);
    expect(await strict.balance(u.userId)).toBe(1);
  });

  test("an altered own link is not ours: it is fetched like any URL (and refused as loopback here), not charged", async () => {
    const u = await strict.userWithKey({ credits: 3 });
    const made = await (await post(strict, "/v1/images/generations", u.key, { prompt: "a source", size: "64x64", response_format: "url" })).json();
    const tampered = (made.data[0].url as string).replace(/signature=[^&]+/, "signature=AAAA");
    await refused(strict, { reference_image: tampered }, "reference_image", "image_url_refused");
  });
});
