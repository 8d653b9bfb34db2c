/**
 * S3ImageBlobs (the archive's bytes in an S3-compatible bucket) against test/support/fakeS3: a
 * real HTTP server on loopback that verifies every request's AWS Signature V4. The fake itself
 * is checked against AWS's published SigV4 example first, so agreeing with it means speaking
 * S3's signing, not merely agreeing with Bun's client. Then: the port's contract (write, read,
 * exists, remove, list with pagination and times, under a prefix), a wrong secret refused, an
 * outage or a hang surfacing as ImageStorageUnavailable within the bound (never as "missing"),
 * and the archive over S3 keeping its rows through an outage.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { ImageArchive, ImageStorageUnavailable, blobKey, type ArchiveSettings } from "../../src/core/imageArchive";
import { sha256Hex } from "../../src/core/digest";
import { createStore, type Store } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { S3ImageBlobs, type S3BlobSettings } from "../../src/store/s3ImageBlobs";
import { S3Failure, startFakeS3, verifySignature, type FakeS3 } from "../support/fakeS3";
import { makePng } from "../support/images";

let s3: FakeS3;

beforeAll(async () => {
  s3 = await startFakeS3();
});
afterAll(async () => {
  await s3.stop();
});
afterEach(() => {
  s3.heal();
  s3.objects.clear();
  s3.requests.length = 0;
});

function blobs(over: Partial<S3BlobSettings> = {}): S3ImageBlobs {
  return new S3ImageBlobs({ bucket: s3.bucket, endpoint: s3.url, region: s3.region, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, prefix: "", timeoutMs: 5_000, ...over });
}

const KEY = blobKey("ab".repeat(32), "image/png");

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected the call to fail");
}

describe("the fake's signature check follows AWS's published SigV4 spec", () => {
  // AWS S3 API reference, "Signature Calculations for the Authorization Header", example "GET Object".
  const example = () =>
    new Request("http://examplebucket.s3.amazonaws.com/test.txt", {
      headers: {
        authorization:
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        "x-amz-date": "20130524T000000Z",
        range: "bytes=0-9",
        "x-amz-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      },
    });
  const expected = { accessKeyId: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", region: "us-east-1", now: Date.UTC(2013, 4, 24) };

  test("AWS's example request verifies with AWS's example secret", () => {
    const req = example();
    expect(() => verifySignature(req, new URL(req.url), new Uint8Array(0), expected)).not.toThrow();
  });

  test("and fails with another secret, another range, or a day later", () => {
    const codeOf = (req: Request, over: Partial<typeof expected> = {}) => {
      try {
        verifySignature(req, new URL(req.url), new Uint8Array(0), { ...expected, ...over });
        return "accepted";
      } catch (e) {
        return (e as S3Failure).code;
      }
    };
    expect(codeOf(example(), { secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ" })).toBe("SignatureDoesNotMatch");
    const altered = example();
    altered.headers.set("range", "bytes=0-10");
    expect(codeOf(altered)).toBe("SignatureDoesNotMatch");
    expect(codeOf(example(), { now: Date.UTC(2013, 4, 25) })).toBe("RequestTimeTooSkewed");
    expect(codeOf(example(), { accessKeyId: "AKIAOTHER" })).toBe("InvalidAccessKeyId");
  });
});

describe("S3ImageBlobs", () => {
  test("write, read, exists and remove, under the prefix", async () => {
    const b = blobs({ prefix: "atelier/images/" });
    const bytes = makePng(4, 4, () => [1, 2, 3, 255]);
    expect(await b.exists(KEY)).toBe(false);
    expect(await b.read(KEY)).toBeNull();
    await b.write(KEY, bytes);
    expect([...s3.objects.keys()]).toEqual([`atelier/images/${KEY}`]);
    expect(s3.objects.get(`atelier/images/${KEY}`)!.bytes).toEqual(bytes);
    expect(s3.objects.get(`atelier/images/${KEY}`)!.contentType).toBe("image/png");
    expect(await b.exists(KEY)).toBe(true);
    expect(await b.read(KEY)).toEqual(bytes);
    await b.remove(KEY);
    await b.remove(KEY); // already gone: no error
    expect(s3.objects.size).toBe(0);
    expect(await b.exists(KEY)).toBe(false);
    // Every one of those calls was signed and accepted.
    expect(s3.requests.every((r) => r.status === 200 || r.status === 204 || (r.status === 404 && r.method !== "PUT"))).toBe(true);
  });

  test("list pages through more than one ListObjectsV2 answer, strips the prefix, skips other prefixes, and gives each object's time", async () => {
    const base = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
    const keys: string[] = [];
    for (let i = 0; i < 2_345; i++) {
      const key = blobKey(sha256Hex(String(i)), "image/png");
      keys.push(key);
      s3.objects.set(`p/${key}`, { bytes: new Uint8Array([i & 255]), contentType: "image/png", modifiedAt: base + i, etag: '"x"' });
    }
    s3.objects.set("other/zz.png", { bytes: new Uint8Array(1), contentType: "image/png", modifiedAt: base, etag: '"x"' });
    const listed: { key: string; modifiedAt: number }[] = [];
    for await (const o of blobs({ prefix: "p/" }).list()) listed.push(o);
    expect(listed.map((o) => o.key).sort()).toEqual(keys.slice().sort());
    const byKey = new Map(listed.map((o) => [o.key, o.modifiedAt]));
    expect(keys.every((k, i) => byKey.get(k) === base + i)).toBe(true);
    const lists = s3.requests.filter((r) => r.path.includes("list-type=2"));
    expect(lists.length).toBe(3);
    expect(lists.every((r) => r.status === 200)).toBe(true);
  });

  test("a wrong secret is refused by the server (403 SignatureDoesNotMatch) and surfaces as ImageStorageUnavailable, without the secret", async () => {
    const secret = "not-the-right-secret-but-a-long-one";
    const b = blobs({ secretAccessKey: secret });
    const e = await rejection(b.write(KEY, new Uint8Array([1])));
    expect(e).toBeInstanceOf(ImageStorageUnavailable);
    expect(e.message).toContain("SignatureDoesNotMatch");
    expect(e.message).not.toContain(secret);
    expect(e.message).not.toContain(s3.secretAccessKey);
    expect(s3.requests.map((r) => [r.method, r.status])).toEqual([["PUT", 403]]);
    expect(s3.objects.size).toBe(0);
    // exists must not read a refusal as "not there".
    expect(await rejection(b.exists(KEY))).toBeInstanceOf(ImageStorageUnavailable);
    expect((await rejection(b.probe())).message).toContain("SignatureDoesNotMatch");
    await blobs().probe(); // the right secret passes
  });

  test("an outage (503) fails every call, and exists never answers false for it", async () => {
    const b = blobs();
    await b.write(KEY, new Uint8Array([1]));
    s3.down();
    // One call at a time, each awaited as it is made: calls started together and awaited in turn
    // left a later one's rejection unhandled while an earlier one was still awaited.
    for (const call of [() => b.write(KEY, new Uint8Array([2])), () => b.read(KEY), () => b.exists(KEY), () => b.remove(KEY), () => b.probe()]) {
      expect(await rejection(call())).toBeInstanceOf(ImageStorageUnavailable);
    }
    expect(await rejection((async () => { for await (const _ of b.list()) void _; })())).toBeInstanceOf(ImageStorageUnavailable);
    s3.heal();
    expect(await b.read(KEY)).toEqual(new Uint8Array([1]));
  });

  test("a bucket that never answers fails the call at the bound", async () => {
    const b = blobs({ timeoutMs: 300 });
    s3.hang();
    const e = await rejection(b.write(KEY, new Uint8Array([1])));
    expect(e).toBeInstanceOf(ImageStorageUnavailable);
    expect(e.message).toContain("no answer within 300 ms");
    expect((await rejection(b.exists(KEY))).message).toContain("no answer within 300 ms");
  });

  test("a stopped server (connection refused) fails the call", async () => {
    const gone = await startFakeS3();
    await gone.stop();
    const b = new S3ImageBlobs({ bucket: gone.bucket, endpoint: gone.url, region: gone.region, accessKeyId: gone.accessKeyId, secretAccessKey: gone.secretAccessKey, prefix: "", timeoutMs: 5_000 });
    expect(await rejection(b.read(KEY))).toBeInstanceOf(ImageStorageUnavailable);
  });
});

describe("the image archive over S3", () => {
  let store: Store;
  const now = Date.now();
  const warnings: unknown[] = [];
  const archive = (settings: Partial<ArchiveSettings> = {}) =>
    new ImageArchive({
      records: store.images,
      blobs: blobs(),
      clock: () => now,
      logger: { warn: (msg) => void warnings.push(msg) },
      settings: { retentionDays: 30, maxBytes: 0, orphanGraceMs: 3_600_000, ...settings },
    });
  const image = (seed: number) => ({ requestId: `req_${seed}`, userId: 1, bytes: makePng(4, 4, () => [seed, 0, 0, 255]), mime: "image/png" as const, width: 4, height: 4 });

  beforeEach(() => {
    store = createStore(openDatabase(":memory:"), latestVersion());
  });
  afterEach(() => store.close());

  test("put keeps the bytes in the bucket, open reads them back; an outage fails put and open, and a sweep during it deletes no row", async () => {
    const a = archive();
    const kept = await a.put(image(1));
    expect(s3.objects.has(blobKey(kept.sha256, "image/png"))).toBe(true);
    expect((await a.open(kept.id))!.bytes).toEqual(image(1).bytes);

    s3.down();
    expect(await rejection(a.put(image(2)))).toBeInstanceOf(ImageStorageUnavailable);
    expect(await rejection(a.open(kept.id))).toBeInstanceOf(ImageStorageUnavailable);
    expect(await rejection(a.sweep())).toBeInstanceOf(ImageStorageUnavailable);
    s3.heal();
    // The row survived the outage's sweep: the image is still served.
    expect((await a.open(kept.id))!.bytes).toEqual(image(1).bytes);
  });

  test("the sweep deletes an object no row references once it is older than the grace, and the row of an object lost outside us, with one HEAD per unseen file only", async () => {
    const a = archive();
    const kept = await a.put(image(3));
    const orphanKey = blobKey(sha256Hex("orphan"), "image/png");
    s3.objects.set(orphanKey, { bytes: new Uint8Array([9]), contentType: "image/png", modifiedAt: now - 2 * 3_600_000, etag: '"o"' });
    const youngKey = blobKey(sha256Hex("young"), "image/png");
    s3.objects.set(youngKey, { bytes: new Uint8Array([9]), contentType: "image/png", modifiedAt: now, etag: '"y"' });
    const lost = await a.put(image(4));
    s3.objects.delete(blobKey(lost.sha256, "image/png"));

    s3.requests.length = 0;
    const report = await a.sweep();
    expect(report).toMatchObject({ orphanFiles: 1, orphanRows: 1 });
    // One listing answers for every file it saw: a HEAD only for the row whose file it did not see.
    expect(s3.requests.filter((r) => r.method === "HEAD").map((r) => r.path)).toEqual([`/${s3.bucket}/${blobKey(lost.sha256, "image/png")}`]);
    expect(s3.objects.has(orphanKey)).toBe(false);
    expect(s3.objects.has(youngKey)).toBe(true);
    expect(await a.open(lost.id)).toBeNull();
    expect((await a.open(kept.id))!.bytes).toEqual(image(3).bytes);
  });
});
