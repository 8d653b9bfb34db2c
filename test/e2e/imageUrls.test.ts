/**
 * `response_format: "url"` end to end with the official openai client: the link downloads the
 * same bytes a b64_json answer carries (builtin-image is deterministic for a prompt and size),
 * without a key, with Content-Type, Content-Length, ETag and caching headers; 304 on
 * If-None-Match; an expired or altered link is 403 in our error shape. Every answer names the
 * kept image (`image_id` and `x-image-id`), and the image is kept on disk under data_dir/images.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { blobKey } from "../../src/core/imageArchive";
import { ImageLinks } from "../../src/core/imageLinks";
import { startTestServer, type TestServer } from "../support/server";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ config: (c) => void (c.server.log_requests = false) });
});
afterAll(async () => {
  await server.close();
});

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
const PROMPT = { model: "builtin-image", prompt: "a red kite over dunes", size: "96x64" as "1024x1024" };

async function b64Answer(key: string) {
  const { data, response } = await client(key).images.generate({ ...PROMPT, response_format: "b64_json" }).withResponse();
  return { bytes: new Uint8Array(Buffer.from(data.data![0]!.b64_json!, "base64")), body: data as typeof data & { image_id?: string }, imageId: response.headers.get("x-image-id") };
}

async function urlAnswer(key: string) {
  const { data, response } = await client(key).images.generate({ ...PROMPT, response_format: "url" }).withResponse();
  return { url: data.data![0]!.url!, body: data as typeof data & { image_id?: string }, imageId: response.headers.get("x-image-id") };
}

describe("response_format url", () => {
  test("the link downloads, without a key, the bytes a b64_json answer carries, with the right headers", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const inline = await b64Answer(u.key);
    const linked = await urlAnswer(u.key);
    expect(await server.balance(u.userId)).toBe(0);

    expect(linked.body.data![0]!.b64_json).toBeUndefined();
    expect(linked.url.startsWith(`${server.url}/files/images/${linked.body.image_id}.png?expires=`)).toBe(true);
    expect(linked.imageId).toBe(linked.body.image_id!);
    expect(inline.imageId).toBe(inline.body.image_id!);
    expect(inline.imageId).toMatch(/^img_/);
    expect(inline.imageId).not.toBe(linked.imageId);

    const res = await fetch(linked.url);
    expect(res.status).toBe(200);
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect(bytes).toEqual(inline.bytes);
    expect(res.headers.get("content-type")).toBe("image/png");
    expect(res.headers.get("content-length")).toBe(String(bytes.byteLength));
    const etag = res.headers.get("etag")!;
    expect(etag).toBe(`"${new Bun.CryptoHasher("sha256").update(bytes).digest("hex")}"`);
    const maxAge = Number(/max-age=(\d+)/.exec(res.headers.get("cache-control") ?? "")?.[1]);
    expect(maxAge).toBeGreaterThan(3500);
    expect(maxAge).toBeLessThanOrEqual(3600);

    const again = await fetch(linked.url, { headers: { "if-none-match": etag } });
    expect(again.status).toBe(304);
    expect(again.headers.get("etag")).toBe(etag);
    expect((await again.arrayBuffer()).byteLength).toBe(0);

    // Content-addressed: the two answers share one file.
    expect(existsSync(join(server.dataDir, "images", blobKey(etag.slice(1, -1), "image/png")))).toBe(true);
  });

  async function expectForbidden(url: string, code: string) {
    const res = await fetch(url);
    expect({ url, status: res.status }).toEqual({ url, status: 403 });
    const body = (await res.json()) as { error: { type: string; code: string; message: string; param: null } };
    expect(body.error).toMatchObject({ type: "permission_error", code, param: null });
    expect(body.error.message.length).toBeGreaterThan(10);
  }

  test("an altered link (id, extension, expires, signature, missing parts) is 403 invalid_signature", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const { url, body } = await urlAnswer(u.key);
    const id = body.image_id!;
    const link = new URL(url);
    const expires = link.searchParams.get("expires")!;
    const signature = link.searchParams.get("signature")!;
    const other = id.slice(0, -1) + (id.endsWith("a") ? "b" : "a");
    await expectForbidden(url.replace(id, other), "invalid_signature");
    await expectForbidden(url.replace(`${id}.png`, `${id}.webp`), "invalid_signature");
    await expectForbidden(url.replace(`expires=${expires}`, `expires=${Number(expires) + 3600}`), "invalid_signature");
    await expectForbidden(url.replace(signature, signature.slice(0, -2) + (signature.endsWith("AA") ? "BB" : "AA")), "invalid_signature");
    await expectForbidden(url.split("?")[0]!, "invalid_signature");
    expect((await fetch(url)).status).toBe(200);
  });

  test("an expired link is 403 link_expired", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const { body } = await urlAnswer(u.key);
    // Signed with the server's key, two hours ago.
    const past = new ImageLinks(() => server.services.store.secrets.getOrCreate("image_links", Date.now()), 3_600_000, () => Date.now() - 7_200_000);
    await expectForbidden(server.url + (await past.pathFor({ id: body.image_id!, mime: "image/png" })).path, "link_expired");
  });

  test("a valid link to an image that is no longer kept is 404 image_not_found", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const { url, body } = await urlAnswer(u.key);
    await server.services.store.images.expireOverBudget(1, Date.now());
    await server.services.images.sweep();
    expect(await server.services.store.images.get(body.image_id!)).toBeNull();
    const res = await fetch(url);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("image_not_found");
  });

  test("an Idempotency-Key replay of a url request answers a fresh link to the same image", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const send = () =>
      fetch(`${server.url}/v1/images/generations`, {
        method: "POST",
        headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json", "idempotency-key": "k-url-1" },
        body: JSON.stringify({ ...PROMPT, prompt: "a replayed kite", response_format: "url" }),
      });
    const first = (await (await send()).json()) as { image_id: string; data: { url: string }[] };
    const replay = await send();
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.headers.get("x-image-id")).toBe(first.image_id);
    const second = (await replay.json()) as { image_id: string; data: { url: string; b64_json?: string }[] };
    expect(second.image_id).toBe(first.image_id);
    expect(second.data[0]!.b64_json).toBeUndefined();
    expect(new Uint8Array(await (await fetch(second.data[0]!.url)).arrayBuffer())).toEqual(new Uint8Array(await (await fetch(first.data[0]!.url)).arrayBuffer()));
    expect(await server.balance(u.userId)).toBe(0);
  });
});
