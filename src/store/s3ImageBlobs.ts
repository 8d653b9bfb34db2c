/**
 * The archive's bytes in an S3-compatible bucket ([storage] kind = "s3"), through Bun's built-in
 * S3 client. The same content-addressed keys as on disk (`ab/cd/<sha256>.<ext>`), under an
 * optional prefix. One PUT of the whole object is atomic in S3 (a reader sees all of it or
 * none), so there is no temporary name.
 *
 * Every call is bounded by timeoutMs (Bun's client takes no signal: past the bound we stop
 * waiting and report a failure). Errors are thrown, never swallowed, because the archive's
 * callers decide: a failed put still delivers the image inline, a failed read answers that the
 * image cannot be served now, and a failed `exists` must not read as "the file is gone" (the
 * sweep would delete the rows of every image during an outage).
 */
import { S3Client } from "bun";
import type { Config } from "../config";
import { ImageStorageUnavailable, type ImageBlobStore } from "../core/imageArchive";

export interface S3BlobSettings {
  bucket: string;
  /** http(s) address of the S3-compatible service; unset: AWS's own for the region. */
  endpoint?: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** Put in front of every key (e.g. "atelier/"). */
  prefix: string;
  /** The longest one call may take. */
  timeoutMs: number;
}

const DEFAULT_REGION = "us-east-1";

/** The settings of [storage] kind = "s3" (config.ts has checked that bucket and credentials are set). */
export function s3BlobSettingsOf(storage: Config["storage"]): S3BlobSettings {
  if (storage.kind !== "s3" || storage.bucket === undefined || storage.access_key_id === undefined || storage.secret_access_key === undefined) {
    throw new Error('[storage] is not kind = "s3" with a bucket and credentials');
  }
  return {
    bucket: storage.bucket,
    endpoint: storage.endpoint,
    // Bun's client would otherwise sign for "auto" (or AWS_REGION) with a custom endpoint.
    region: storage.region ?? DEFAULT_REGION,
    accessKeyId: storage.access_key_id,
    secretAccessKey: storage.secret_access_key,
    prefix: storage.prefix,
    timeoutMs: storage.timeout_ms,
  };
}

/** The objects one ListObjectsV2 call returns (S3's own maximum). */
const LIST_PAGE = 1000;

export class S3ImageBlobs implements ImageBlobStore {
  private readonly client: S3Client;

  constructor(private readonly settings: S3BlobSettings) {
    this.client = new S3Client({
      bucket: settings.bucket,
      endpoint: settings.endpoint,
      region: settings.region,
      accessKeyId: settings.accessKeyId,
      secretAccessKey: settings.secretAccessKey,
    });
  }

  /** Where this store writes, for logs and `atelier doctor` (no credentials). */
  describe(): string {
    const where = this.settings.endpoint !== undefined ? new URL(this.settings.endpoint).host : `AWS ${this.settings.region}`;
    return `s3://${this.settings.bucket}/${this.settings.prefix} at ${where}`;
  }

  private objectKey(key: string): string {
    if (key.includes("..") || key.startsWith("/")) throw new Error(`not a blob key: ${key}`);
    return this.settings.prefix + key;
  }

  async write(key: string, bytes: Uint8Array): Promise<void> {
    await this.bounded(`PUT ${key}`, this.client.write(this.objectKey(key), bytes));
  }

  async read(key: string): Promise<Uint8Array | null> {
    try {
      return await this.bounded(`GET ${key}`, this.client.file(this.objectKey(key)).bytes(), true);
    } catch (e) {
      if (e === NOT_FOUND) return null;
      throw e;
    }
  }

  /** False only when the bucket says the object is not there; any other failure throws. */
  async exists(key: string): Promise<boolean> {
    return this.bounded(`HEAD ${key}`, this.client.exists(this.objectKey(key)));
  }

  async remove(key: string): Promise<void> {
    // S3 answers 204 for a key that is already gone.
    await this.bounded(`DELETE ${key}`, this.client.delete(this.objectKey(key)));
  }

  async *list(): AsyncIterable<{ key: string; modifiedAt: number }> {
    const { prefix } = this.settings;
    let continuationToken: string | undefined;
    for (;;) {
      const page = await this.bounded("LIST", this.client.list({ prefix, maxKeys: LIST_PAGE, continuationToken }));
      for (const o of page.contents ?? []) {
        if (!o.key.startsWith(prefix)) continue;
        const modified = o.lastModified !== undefined ? Date.parse(o.lastModified) : Number.NaN;
        // An object without a readable time counts as just written: the sweep leaves it alone.
        yield { key: o.key.slice(prefix.length), modifiedAt: Number.isFinite(modified) ? modified : Date.now() };
      }
      if (!page.isTruncated || !page.nextContinuationToken) return;
      continuationToken = page.nextContinuationToken;
    }
  }

  /** One small authenticated call (a one-key listing): resolves when the bucket answers and accepts the credentials. */
  async probe(timeoutMs = this.settings.timeoutMs): Promise<void> {
    await this.bounded("LIST", this.client.list({ prefix: this.settings.prefix, maxKeys: 1 }), false, timeoutMs);
  }

  /** The call's result, or ImageStorageUnavailable (naming the call and the service's error code, never a credential) when it fails or outlasts the bound (NOT_FOUND for a missing key when asked). */
  private async bounded<T>(call: string, pending: Promise<T>, notFoundAsMarker = false, timeoutMs = this.settings.timeoutMs): Promise<T> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ImageStorageUnavailable(`S3 ${call} on bucket ${this.settings.bucket}: no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    // A call abandoned at the bound may still fail later: that failure is already reported.
    pending.catch(() => undefined);
    try {
      return await Promise.race([pending, late]);
    } catch (e) {
      if (e instanceof ImageStorageUnavailable) throw e;
      const code = (e as { code?: unknown }).code;
      if (notFoundAsMarker && code === "NoSuchKey") throw NOT_FOUND;
      throw new ImageStorageUnavailable(`S3 ${call} on bucket ${this.settings.bucket} failed: ${typeof code === "string" ? `${code}: ` : ""}${(e as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Internal marker: the GET found no such key (read answers null). */
const NOT_FOUND = Symbol("not found");
