/**
 * A fake S3-compatible server on a loopback port: the REST calls Bun.S3Client makes for the
 * image archive (PUT, GET, HEAD and DELETE of an object, ListObjectsV2, HEAD of the bucket),
 * path-style (`/{bucket}/{key}`), one bucket, objects in memory.
 *
 * It VERIFIES the AWS Signature Version 4 of every request the way S3 does (AWS's published
 * spec, "Authenticating Requests: Using the Authorization Header"): it rebuilds the canonical
 * request from what arrived, derives the signing key from its own copy of the secret, and
 * answers 403 SignatureDoesNotMatch when the signatures differ, 403 InvalidAccessKeyId for an
 * unknown key id, 403 RequestTimeTooSkewed for a date more than 15 minutes off, 400
 * XAmzContentSHA256Mismatch when a signed payload hash is not the body's, and 403 AccessDenied
 * for an unsigned request. (s3rver, the npm S3 server, skips V4 verification, so it cannot prove
 * a wrong secret is refused.)
 *
 * Faults for tests: `down()` answers every request 503 ServiceUnavailable, `hang()` never
 * answers (until `heal()` or `stop()`), `stop()` closes the socket (connection refused).
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { Server } from "bun";

export interface FakeS3Object {
  bytes: Uint8Array<ArrayBuffer>;
  contentType: string;
  /** Epoch ms of the last write (LastModified); tests may move it back. */
  modifiedAt: number;
  etag: string;
}

export interface FakeS3Options {
  bucket?: string;
  region?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** The server's clock (LastModified, the skew check); Date.now by default. */
  clock?: () => number;
}

export interface FakeS3 {
  url: string;
  bucket: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** The bucket's objects by key. */
  objects: Map<string, FakeS3Object>;
  /** Every request that arrived: method, path and query, and the status answered ("hung" while unanswered). */
  requests: { method: string; path: string; status: number | "hung" }[];
  /** Every request is answered 503 ServiceUnavailable until heal(). */
  down(): void;
  /** No request is answered until heal() or stop(). */
  hang(): void;
  heal(): void;
  stop(): Promise<void>;
}

/** Seconds of clock skew S3 accepts between x-amz-date and its own time. */
const MAX_SKEW_MS = 15 * 60_000;
const MAX_KEYS = 1000;

export class S3Failure {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly message: string,
  ) {}
}

export async function startFakeS3(options: FakeS3Options = {}): Promise<FakeS3> {
  const bucket = options.bucket ?? "atelier-images";
  const region = options.region ?? "us-east-1";
  const accessKeyId = options.accessKeyId ?? "AKIAFAKES3TEST000001";
  const secretAccessKey = options.secretAccessKey ?? "fake-s3-secret-0123456789abcdefghijklmnop";
  const clock = options.clock ?? Date.now;
  const objects = new Map<string, FakeS3Object>();
  const requests: FakeS3["requests"] = [];
  let mode: "ok" | "down" | "hang" = "ok";
  const hung: (() => void)[] = [];

  const releaseHung = () => {
    for (const release of hung.splice(0)) release();
  };

  async function answer(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const body = new Uint8Array(await req.arrayBuffer());
    verifySignature(req, url, body, { accessKeyId, secretAccessKey, region, now: clock() });
    const [, first, ...rest] = url.pathname.split("/");
    const bucketName = decodeURIComponent(first ?? "");
    const key = rest.map(decodeURIComponent).join("/");
    if (bucketName !== bucket) throw new S3Failure(404, "NoSuchBucket", "The specified bucket does not exist.");
    if (key === "") {
      if (req.method === "HEAD") return new Response(null, { status: 200 });
      if (req.method === "GET" && url.searchParams.get("list-type") === "2") return listObjectsV2(url.searchParams);
      throw new S3Failure(501, "NotImplemented", `${req.method} on the bucket is not implemented by the fake.`);
    }
    switch (req.method) {
      case "PUT": {
        if (req.headers.has("x-amz-copy-source") || url.searchParams.has("uploadId")) throw new S3Failure(501, "NotImplemented", "Copies and multipart uploads are not implemented by the fake.");
        const etag = `"${createHash("md5").update(body).digest("hex")}"`;
        objects.set(key, { bytes: body, contentType: req.headers.get("content-type") ?? "application/octet-stream", modifiedAt: clock(), etag });
        return new Response(null, { status: 200, headers: { etag } });
      }
      case "GET":
      case "HEAD": {
        const o = objects.get(key);
        if (!o) {
          if (req.method === "HEAD") return new Response(null, { status: 404 });
          throw new S3Failure(404, "NoSuchKey", "The specified key does not exist.");
        }
        const headers = { "content-type": o.contentType, "content-length": String(o.bytes.byteLength), etag: o.etag, "last-modified": new Date(o.modifiedAt).toUTCString() };
        return new Response(req.method === "HEAD" ? null : o.bytes, { status: 200, headers });
      }
      case "DELETE":
        objects.delete(key);
        return new Response(null, { status: 204 });
      default:
        throw new S3Failure(405, "MethodNotAllowed", `${req.method} is not allowed.`);
    }
  }

  function listObjectsV2(q: URLSearchParams): Response {
    const prefix = q.get("prefix") ?? "";
    const maxKeys = Math.min(MAX_KEYS, Math.max(0, Number(q.get("max-keys") ?? MAX_KEYS)));
    const token = q.get("continuation-token");
    const after = token !== null ? Buffer.from(token, "base64url").toString() : (q.get("start-after") ?? "");
    const keys = [...objects.keys()].filter((k) => k.startsWith(prefix) && k > after).sort();
    const page = keys.slice(0, maxKeys);
    const truncated = keys.length > page.length;
    const contents = page
      .map((k) => {
        const o = objects.get(k)!;
        return `<Contents><Key>${xml(k)}</Key><LastModified>${new Date(o.modifiedAt).toISOString()}</LastModified><ETag>${xml(o.etag)}</ETag><Size>${o.bytes.byteLength}</Size><StorageClass>STANDARD</StorageClass></Contents>`;
      })
      .join("");
    const next = truncated ? `<NextContinuationToken>${Buffer.from(page[page.length - 1]!).toString("base64url")}</NextContinuationToken>` : "";
    const echoed = token !== null ? `<ContinuationToken>${xml(token)}</ContinuationToken>` : "";
    const text = `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>${xml(bucket)}</Name><Prefix>${xml(prefix)}</Prefix><KeyCount>${page.length}</KeyCount><MaxKeys>${maxKeys}</MaxKeys><IsTruncated>${truncated}</IsTruncated>${echoed}${next}${contents}</ListBucketResult>`;
    return new Response(text, { status: 200, headers: { "content-type": "application/xml" } });
  }

  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    development: false,
    async fetch(req) {
      const url = new URL(req.url);
      const entry: FakeS3["requests"][number] = { method: req.method, path: url.pathname + url.search, status: "hung" };
      requests.push(entry);
      if (mode === "hang") {
        await new Promise<void>((resolve) => hung.push(resolve));
        return new Response(null, { status: 503 });
      }
      let res: Response;
      try {
        if (mode === "down") throw new S3Failure(503, "ServiceUnavailable", "Please reduce your request rate.");
        res = await answer(req);
      } catch (e) {
        if (!(e instanceof S3Failure)) throw e;
        const text = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${e.code}</Code><Message>${xml(e.message)}</Message></Error>`;
        res = new Response(req.method === "HEAD" ? null : text, { status: e.status, headers: { "content-type": "application/xml" } });
      }
      entry.status = res.status;
      return res;
    },
  });

  return {
    url: `http://127.0.0.1:${server.port}`,
    bucket,
    region,
    accessKeyId,
    secretAccessKey,
    objects,
    requests,
    down: () => void (mode = "down"),
    hang: () => void (mode = "hang"),
    heal() {
      mode = "ok";
      releaseHung();
    },
    async stop() {
      mode = "ok";
      releaseHung();
      await server.stop(true);
    },
  };
}

function xml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** RFC 3986 unreserved characters stay; everything else is %XX (upper case), as SigV4 requires. */
function uriEncode(s: string, keepSlash: boolean): string {
  let out = "";
  for (const byte of Buffer.from(s, "utf8")) {
    const c = String.fromCharCode(byte);
    if (/[A-Za-z0-9\-._~]/.test(c) || (keepSlash && c === "/")) out += c;
    else out += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

const hmac = (key: Uint8Array | string, data: string) => createHmac("sha256", key).update(data).digest();
const sha256Hex = (data: Uint8Array | string) => createHash("sha256").update(data).digest("hex");

const AUTH = /^AWS4-HMAC-SHA256 Credential=([^/,\s]+)\/(\d{8})\/([^/,\s]+)\/([^/,\s]+)\/aws4_request,\s*SignedHeaders=([a-z0-9\-;]+),\s*Signature=([0-9a-f]{64})$/;

/**
 * SigV4, header form: the canonical request (method, URI, query, signed headers, payload hash)
 * hashed into the string to sign under the credential scope, signed with the key derived
 * from the secret, date, region and service.
 */
export function verifySignature(req: Request, url: URL, body: Uint8Array, expected: { accessKeyId: string; secretAccessKey: string; region: string; now: number }): void {
  const authorization = req.headers.get("authorization");
  if (authorization === null) throw new S3Failure(403, "AccessDenied", "Anonymous access is forbidden for this operation.");
  const m = AUTH.exec(authorization);
  if (!m) throw new S3Failure(400, "AuthorizationHeaderMalformed", "The authorization header is malformed.");
  const [, keyId, date, region, service, signedHeaderList, signature] = m as unknown as [string, string, string, string, string, string, string];
  if (keyId !== expected.accessKeyId) throw new S3Failure(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.");
  if (region !== expected.region || service !== "s3") throw new S3Failure(400, "AuthorizationHeaderMalformed", `The region or service in the credential scope is wrong; expecting '${expected.region}'.`);

  const amzDate = req.headers.get("x-amz-date") ?? "";
  const when = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(amzDate);
  if (!when || amzDate.slice(0, 8) !== date) throw new S3Failure(403, "AccessDenied", "x-amz-date is missing or does not match the credential scope's date.");
  const at = Date.UTC(+when[1]!, +when[2]! - 1, +when[3]!, +when[4]!, +when[5]!, +when[6]!);
  if (Math.abs(at - expected.now) > MAX_SKEW_MS) throw new S3Failure(403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large.");

  const payloadHash = req.headers.get("x-amz-content-sha256");
  if (payloadHash === null) throw new S3Failure(400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256.");
  if (payloadHash !== "UNSIGNED-PAYLOAD" && payloadHash !== sha256Hex(body)) {
    throw new S3Failure(400, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.");
  }

  const signedHeaders = signedHeaderList.split(";");
  // S3 requires host and every x-amz-* header that was sent to be signed.
  const unsigned = [...req.headers.keys()].filter((h) => h.startsWith("x-amz-") && !signedHeaders.includes(h));
  if (!signedHeaders.includes("host") || unsigned.length > 0) throw new S3Failure(403, "AccessDenied", "There were headers present in the request which were not signed.");
  const canonicalHeaders = signedHeaders.map((h) => `${h}:${(h === "host" ? url.host : (req.headers.get(h) ?? "")).trim().replace(/\s+/g, " ")}\n`).join("");
  const canonicalUri = uriEncode(url.pathname.split("/").map(decodeURIComponent).join("/"), true);
  const canonicalQuery = [...url.searchParams]
    .map(([k, v]) => [uriEncode(k, false), uriEncode(v, false)] as const)
    .sort(([a, x], [b, y]) => (a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  const canonicalRequest = [req.method, canonicalUri, canonicalQuery, canonicalHeaders, signedHeaderList, payloadHash].join("\n");
  const scope = `${date}/${region}/${service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256Hex(canonicalRequest)].join("\n");
  const signingKey = hmac(hmac(hmac(hmac(`AWS4${expected.secretAccessKey}`, date), region), service), "aws4_request");
  const computed = Buffer.from(createHmac("sha256", signingKey).update(stringToSign).digest("hex"));
  if (!timingSafeEqual(computed, Buffer.from(signature))) {
    throw new S3Failure(403, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method.");
  }
}
