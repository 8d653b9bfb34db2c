/**
 * [storage] kind = "s3" end to end: two real servers on one database and one bucket (the fake
 * S3 server, which verifies every request's signature), credentials through `${ENV}`. A link
 * one instance answers is served by the other (the signing key is in the database, the bytes in
 * the bucket); nothing is written under data_dir/images. /readyz reports the bucket; during an
 * outage an image request is still answered (inline, paid once, no lost credit), its link is
 * 503 storage_unavailable, and everything works again once the bucket is back. A wrong secret
 * is refused by the bucket and never appears in a log line.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { blobKey } from "../../src/core/imageArchive";
import { startFakeS3, type FakeS3 } from "../support/fakeS3";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";

let s3: FakeS3;
let sharedDir: string;
let a: TestServer;
let b: TestServer;

const toml = `
[server]
log_requests = false

[storage]
kind = "s3"
bucket = "atelier-images"
endpoint = "\${S3_ENDPOINT}"
region = "us-east-1"
access_key_id = "\${S3_KEY_ID}"
secret_access_key = "\${S3_SECRET}"
prefix = "kept/"
timeout_ms = 2000
`;

const env = (secret: string) => ({ S3_ENDPOINT: s3.url, S3_KEY_ID: s3.accessKeyId, S3_SECRET: secret });

beforeAll(async () => {
  s3 = await startFakeS3({ bucket: "atelier-images" });
  sharedDir = tempDir("atelier-shared-");
  // Two instances of the service: one database (data_dir), one bucket.
  a = await startTestServer({ toml, env: env(s3.secretAccessKey), config: (c) => void (c.server.data_dir = sharedDir) });
  b = await startTestServer({ toml, env: env(s3.secretAccessKey), config: (c) => void (c.server.data_dir = sharedDir) });
});
afterAll(async () => {
  await a?.close();
  await b?.close();
  await s3.stop();
  rmSync(sharedDir, { recursive: true, force: true });
});

const PROMPT = { model: "builtin-image", size: "96x64" as "1024x1024" };
const client = (server: TestServer, key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });

async function readyz(server: TestServer) {
  const res = await fetch(`${server.url}/readyz`);
  return { status: res.status, body: await res.json() };
}

describe("images kept in an S3 bucket", () => {
  test("a link made by one instance is served by the other, with the bytes from the bucket and none on disk", async () => {
    const u = await a.userWithKey({ credits: 2 });
    const linked = await client(a, u.key).images.generate({ ...PROMPT, prompt: "a kite seen from two instances", response_format: "url" });
    const inline = await client(b, u.key).images.generate({ ...PROMPT, prompt: "a kite seen from two instances", response_format: "b64_json" });
    const url = linked.data![0]!.url!;
    expect(url.startsWith(`${a.url}/files/images/`)).toBe(true);
    const expected = new Uint8Array(Buffer.from(inline.data![0]!.b64_json!, "base64"));
    const sha = new Bun.CryptoHasher("sha256").update(expected).digest("hex");

    // The other instance serves the link: the same signing key (database), the same bytes (bucket).
    const res = await fetch(url.replace(a.url, b.url));
    expect(res.status).toBe(200);
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(expected);
    expect(res.headers.get("etag")).toBe(`"${sha}"`);

    // One content-addressed object under the prefix (both answers are the same image); no files.
    expect(s3.objects.get(`kept/${blobKey(sha, "image/png")}`)?.bytes).toEqual(expected);
    expect(existsSync(join(sharedDir, "images"))).toBe(false);
    expect(await a.balance(u.userId)).toBe(0);
    expect(s3.requests.every((r) => r.status !== 403)).toBe(true);
  });

  test("/readyz reports the bucket; an outage keeps the instance ready, answers images inline at one credit each, and its links 503 storage_unavailable", async () => {
    expect(await readyz(a)).toEqual({ status: 200, body: { status: "ready", storage: "ok" } });
    const u = await a.userWithKey({ credits: 3 });
    const before = await client(a, u.key).images.generate({ ...PROMPT, prompt: "kept before the outage", response_format: "url" });
    const link = before.data![0]!.url!;

    s3.down();
    try {
      expect(await readyz(b)).toEqual({ status: 200, body: { status: "ready", storage: "unreachable" } });
      // The image is paid for and delivered inline, without an id (it could not be kept).
      const { data, response } = await client(b, u.key).images.generate({ ...PROMPT, prompt: "made during the outage", response_format: "url" }).withResponse();
      expect(response.status).toBe(200);
      expect(data.data![0]!.url).toBeUndefined();
      expect(data.data![0]!.b64_json!.length).toBeGreaterThan(100);
      expect((data as { image_id?: string }).image_id).toBeUndefined();
      expect(response.headers.get("x-image-id")).toBeNull();
      expect(await b.balance(u.userId)).toBe(1);

      const res = await fetch(link.replace(a.url, b.url));
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).not.toBeNull();
      expect(((await res.json()) as { error: { code: string; type: string } }).error).toMatchObject({ code: "storage_unavailable", type: "server_error" });
      expect(b.logs.some((l) => l.includes("could not keep a generated image"))).toBe(true);
    } finally {
      s3.heal();
    }
    // Back without a restart.
    expect(await readyz(b)).toEqual({ status: 200, body: { status: "ready", storage: "ok" } });
    expect((await fetch(link.replace(a.url, b.url))).status).toBe(200);
    const after = await client(b, u.key).images.generate({ ...PROMPT, prompt: "kept after the outage", response_format: "url" });
    expect((await fetch(after.data![0]!.url!)).status).toBe(200);
    expect(await b.balance(u.userId)).toBe(0);
  });

  test("a wrong secret: the bucket refuses it, /readyz says unreachable, images still arrive inline, and no log line holds either secret", async () => {
    const wrong = "wrong-secret-0123456789-abcdefghijkl";
    const c = await startTestServer({ toml, env: env(wrong) });
    try {
      expect(await readyz(c)).toEqual({ status: 200, body: { status: "ready", storage: "unreachable" } });
      const refusedBefore = s3.requests.filter((r) => r.status === 403).length;
      const u = await c.userWithKey({ credits: 1 });
      const answer = await client(c, u.key).images.generate({ ...PROMPT, prompt: "refused by the bucket", response_format: "b64_json" });
      expect(answer.data![0]!.b64_json!.length).toBeGreaterThan(100);
      expect(s3.requests.filter((r) => r.status === 403).length).toBeGreaterThan(refusedBefore);
      const logs = c.logs.join("\n");
      expect(logs).toContain("SignatureDoesNotMatch");
      expect(logs).not.toContain(wrong);
      expect(logs).not.toContain(s3.secretAccessKey);
    } finally {
      await c.close();
    }
    expect([...a.logs, ...b.logs].join("\n")).not.toContain(s3.secretAccessKey);
  });
});
