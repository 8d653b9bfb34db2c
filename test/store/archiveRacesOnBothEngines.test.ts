/**
 * Two instances archiving into one bucket (the fake S3) and one database: a put of some bytes and
 * a deletion of the last row of the same bytes (the sweep's expiry, the gallery's Delete) on the
 * other instance, in each order that used to lose the object under a new row:
 * - the put found the object (so it skips the write) and stops there; the other instance deletes
 *   the last old row, finds no row and deletes the object; the put's row then had no object;
 * - the deletion found no row and stops before deleting the object; the put finds the object
 *   and adds its row; the deletion then deleted the object under it.
 * The interleaving is made, not timed: one instance's blob store stops at that point, and is
 * released once the other instance has either finished (the bug) or waits for the content
 * address (PostgreSQL: a lock wait in pg_locks; SQLite, one process: its call joined the
 * process's queue for the address in the same step).
 *
 * On PostgreSQL two pools stand for two instances; on SQLite the one connection and its one
 * ImageRecords stand for the one process an embedded server is.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ImageArchive, blobKey, type ImageBlobStore, type ImageRecords as RecordsPort } from "../../src/core/imageArchive";
import { ImageRecords } from "../../src/store/images";
import { S3ImageBlobs } from "../../src/store/s3ImageBlobs";
import type { SqlClient } from "../../src/store/sql";
import { bothEngines } from "../support/bothEngines";
import { startFakeS3, type FakeS3 } from "../support/fakeS3";
import { makePng } from "../support/images";
import { until } from "../support/until";

const DAY = 86_400_000;

/** A blob store that stops once, at the chosen point of its next call of that kind, until released. */
class PausingBlobs implements ImageBlobStore {
  private stop: { at: "after exists" | "before remove"; reached: () => void; gate: Promise<void> } | null = null;

  constructor(private readonly inner: ImageBlobStore) {}

  pauseAt(at: "after exists" | "before remove"): { reached: Promise<void>; release: () => void } {
    let reached!: () => void;
    let release!: () => void;
    const reachedP = new Promise<void>((r) => (reached = r));
    this.stop = { at, reached, gate: new Promise<void>((r) => (release = r)) };
    return { reached: reachedP, release };
  }

  private async hold(at: "after exists" | "before remove"): Promise<void> {
    const stop = this.stop;
    if (stop?.at !== at) return;
    this.stop = null;
    stop.reached();
    await stop.gate;
  }

  async exists(key: string): Promise<boolean> {
    const answer = await this.inner.exists(key);
    await this.hold("after exists");
    return answer;
  }

  async remove(key: string): Promise<void> {
    await this.hold("before remove");
    return this.inner.remove(key);
  }

  write(key: string, bytes: Uint8Array): Promise<void> {
    return this.inner.write(key, bytes);
  }

  read(key: string): Promise<Uint8Array | null> {
    return this.inner.read(key);
  }

  list(): AsyncIterable<{ key: string; modifiedAt: number }> {
    return this.inner.list();
  }
}

let s3: FakeS3;
let prefixes = 0;
beforeAll(async () => {
  s3 = await startFakeS3();
});
afterAll(() => s3?.stop());

const WAITERS_SQL = `SELECT CAST(COUNT(*) AS BIGINT) AS n FROM pg_locks
  WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`;

for (const engine of bothEngines()) {
  describe(`two instances archiving the same bytes on ${engine.name}`, () => {
    afterAll(() => engine.stop());

    let now: number;
    let sql: SqlClient;
    let prefix: string;

    /** Instance A and B over a fresh database and a fresh prefix of the bucket. */
    async function instances() {
      now = Date.now();
      const opened = await engine.open();
      sql = opened.a;
      prefix = `t${++prefixes}/`;
      const recordsA = new ImageRecords(opened.a);
      const recordsB = opened.b === opened.a ? recordsA : new ImageRecords(opened.b);
      return { a: instance(recordsA), b: instance(recordsB) };
    }

    function instance(records: ImageRecords) {
      const blobs = new PausingBlobs(
        new S3ImageBlobs({ bucket: s3.bucket, endpoint: s3.url, region: s3.region, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, prefix, timeoutMs: 5_000 }),
      );
      // Tells when this instance next asks for a content address (SQLite: it is then in the queue).
      const askers: (() => void)[] = [];
      const spied: RecordsPort = Object.assign(Object.create(records) as ImageRecords, {
        withContent: (sha256: string, fn: Parameters<ImageRecords["withContent"]>[1]) => {
          for (const asked of askers.splice(0)) asked();
          return records.withContent(sha256, fn);
        },
      });
      const archive = new ImageArchive({ records: spied, blobs, clock: () => now, logger: { warn() {} }, settings: { retentionDays: 1, maxBytes: 0, orphanGraceMs: 3_600_000 } });
      // Ask before starting the call: a put asks in its first step.
      return { archive, blobs, nextAsk: () => new Promise<void>((r) => askers.push(r)) };
    }

    /** Resolves once `other` can no longer slip in before the paused instance goes on: it finished, or it waits for the content address. */
    async function finishedOrWaiting(other: Promise<unknown>, asked: Promise<void>): Promise<void> {
      let finished = false;
      const settled = other.then(
        () => void (finished = true),
        () => void (finished = true),
      );
      if (sql.dialect === "postgres") await until(async () => finished || (await sql.get<{ n: number }>(WAITERS_SQL))!.n > 0, "the other instance to finish or wait");
      else await Promise.race([settled, asked]);
    }

    const png = makePng(8, 8, () => [10, 20, 30, 255]);
    const image = (requestId: string) => ({ requestId, userId: 1, bytes: png, mime: "image/png" as const, width: 8, height: 8 });
    const objectKey = (sha256: string) => prefix + blobKey(sha256, "image/png");

    test("a put that found the object, then a sweep elsewhere expiring the last old row: the new row keeps its object", async () => {
      const { a, b } = await instances();
      const old = await a.archive.put(image("req_old"));
      now += 2 * DAY; // the old row has expired

      const pause = a.blobs.pauseAt("after exists");
      const put = a.archive.put(image("req_new"));
      await pause.reached; // the object exists: A will not write it
      const asked = b.nextAsk();
      const sweep = b.archive.sweep();
      await finishedOrWaiting(sweep, asked);
      pause.release();
      const row = await put;

      expect((await sweep).expired).toBe(1);
      expect(s3.objects.has(objectKey(old.sha256))).toBe(true);
      expect((await b.archive.open(row.id))?.bytes).toEqual(png);
      expect(await b.archive.sweep()).toEqual({ expired: 0, orphanFiles: 0, orphanRows: 0 });
      expect((await a.archive.open(row.id))?.bytes).toEqual(png);
    });

    test("a put that found the object, then a gallery delete elsewhere of the last old row: the new row keeps its object", async () => {
      const { a, b } = await instances();
      const old = await a.archive.put(image("req_old"));

      const pause = a.blobs.pauseAt("after exists");
      const put = a.archive.put(image("req_new"));
      await pause.reached;
      const asked = b.nextAsk();
      const deleted = b.archive.deleteForUser(old.id, 1);
      await finishedOrWaiting(deleted, asked);
      pause.release();
      const row = await put;

      expect(await deleted).toBe(true);
      expect(await b.archive.open(old.id)).toBeNull();
      expect(s3.objects.has(objectKey(old.sha256))).toBe(true);
      expect((await b.archive.open(row.id))?.bytes).toEqual(png);
    });

    test("a delete that found no row left, then a put elsewhere of the same bytes: the put's row has its object", async () => {
      const { a, b } = await instances();
      const old = await b.archive.put(image("req_old"));

      const pause = b.blobs.pauseAt("before remove");
      const deleted = b.archive.deleteForUser(old.id, 1);
      await pause.reached; // B found no row of the bytes and is about to delete the object
      const asked = a.nextAsk();
      const put = a.archive.put(image("req_new"));
      await finishedOrWaiting(put, asked);
      pause.release();
      expect(await deleted).toBe(true);
      const row = await put;

      expect(s3.objects.has(objectKey(old.sha256))).toBe(true); // A wrote it again
      expect((await a.archive.open(row.id))?.bytes).toEqual(png);
      expect((await b.archive.sweep()).orphanRows).toBe(0);
    });
  });
}
