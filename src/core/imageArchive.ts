/**
 * The image archive: every successful output is kept, a row per image (store/images.ts) over
 * content-addressed bytes in a blob store (a folder today, an S3-compatible bucket later: one
 * small port, ImageBlobStore).
 *
 * The rules:
 * - put: the bytes first (atomically: a reader sees the whole object or none), then the row.
 *   A crash in between leaves a file without a row, never a row without its file.
 * - sweep: rows first (expired ones, in one transaction), then the files no row references.
 *   A crash in between again leaves files without rows.
 * - repair (every sweep): a file no row references is deleted (after a grace, so a put in
 *   another process between its write and its row is not raced); a row whose file is missing
 *   is deleted (the file was lost outside us), so rows and files never disagree for long.
 * - A content address is held (ImageRecords.withContent: in this process and, on a shared
 *   database, against every instance) from a put's look for the file to its row, and from a
 *   deletion's look for rows to its deleting the file. Without it a put that found the file
 *   (so did not write it) could add its row just after another instance, seeing no row, deleted
 *   the file: a row without its file, a paid image answering 404. Row deletions need no hold:
 *   only deleting a file, or counting on one being there, does.
 */
import type { Clock } from "./clock";
import type { ImageMime } from "./engine";
import { sha256Hex } from "./digest";
import { newId } from "./ids";
import { timerDelay } from "./timerDelay";

export interface ArchivedImage {
  id: string;
  requestId: string;
  userId: number;
  mime: ImageMime;
  bytes: number;
  width: number;
  height: number;
  sha256: string;
  createdAt: number;
  /** Epoch ms after which the image is gone; null keeps it until max_bytes evicts it. */
  expiresAt: number | null;
}

export interface NewImage {
  requestId: string;
  userId: number;
  bytes: Uint8Array;
  mime: ImageMime;
  width: number;
  height: number;
}

/** Where the bytes live. Keys are content addresses (see blobKey). */
export interface ImageBlobStore {
  /** Atomic and durable: after it resolves the whole object is there, and a crash never leaves part of it under `key`. */
  write(key: string, bytes: Uint8Array): Promise<void>;
  read(key: string): Promise<Uint8Array | null>;
  exists(key: string): Promise<boolean>;
  /** No error when it is already gone. */
  remove(key: string): Promise<void>;
  /** Every stored object, with when it was last written (epoch ms). */
  list(): AsyncIterable<{ key: string; modifiedAt: number }>;
}

/** The blob store failed or did not answer in time (a bucket's outage): the bytes cannot be kept or read right now. */
export class ImageStorageUnavailable extends Error {
  override name = "ImageStorageUnavailable";
}

/** The rows of one content address, while it is held (ImageRecords.withContent). */
export interface ContentRecords {
  /** Adds a row of the held bytes (row.sha256 must be the held address). */
  insert(row: ArchivedImage): Promise<void>;
  /** Whether any row references the held bytes. */
  referenced(): Promise<boolean>;
  /** Deletes every row of the held bytes (their file is lost); returns how many. */
  removeAll(): Promise<number>;
}

/** The rows (implemented in store/images.ts). */
export interface ImageRecords {
  /**
   * Runs fn holding the content address against every other holder of it: in this process and
   * in every instance sharing the rows. What fn writes through `rows` is visible to the next
   * holder. The archive looks for, writes and deletes a file only while holding its address.
   */
  withContent<T>(sha256: string, fn: (rows: ContentRecords) => Promise<T>): Promise<T>;
  get(id: string): Promise<ArchivedImage | null>;
  /** Expires (expires_at = now) the oldest unexpired images until the unexpired total is at most maxBytes; returns how many. */
  expireOverBudget(maxBytes: number, now: number): Promise<number>;
  /** Up to `limit` images expired at `now`, oldest first. */
  expired(now: number, limit: number): Promise<ArchivedImage[]>;
  /**
   * Deletes the rows in one transaction; returns the content addresses (sha256 and mime) no row
   * referenced when it committed (a put may add one before their files are deleted: look again
   * while holding the address).
   */
  remove(ids: string[]): Promise<{ sha256: string; mime: ImageMime }[]>;
  /** The distinct contents, by sha256, after `after`, `limit` at a time. */
  contents(after: string, limit: number): Promise<{ sha256: string; mime: ImageMime }[]>;
}

/** What the image flow needs: keep one image. */
export interface ImageKeeper {
  put(image: NewImage): Promise<ArchivedImage>;
  /** The image and its bytes, or null when it does not exist, has expired or its file is gone. */
  open(id: string): Promise<{ image: ArchivedImage; bytes: Uint8Array } | null>;
}

export interface ArchiveSettings {
  /** 0 keeps images until max_bytes evicts them. */
  retentionDays: number;
  /** 0: no limit. Counted over rows (an image kept twice counts twice). */
  maxBytes: number;
  /** A file without a row younger than this is left alone (another process may be between its write and its row). */
  orphanGraceMs: number;
}

export const IMAGE_EXTENSIONS: Record<ImageMime, "png" | "jpg" | "webp"> = { "image/png": "png", "image/jpeg": "jpg", "image/webp": "webp" };
const MIME_OF_EXTENSION: Record<string, ImageMime> = { png: "image/png", jpg: "image/jpeg", webp: "image/webp" };

/** `ab/cd/abcd…ef.png`: sharded by the first two bytes of the sha256. */
export function blobKey(sha256: string, mime: ImageMime): string {
  return `${sha256.slice(0, 2)}/${sha256.slice(2, 4)}/${sha256}.${IMAGE_EXTENSIONS[mime]}`;
}

/** The content address a key names, or null for anything else in the store. */
export function parseBlobKey(key: string): { sha256: string; mime: ImageMime } | null {
  const m = /^([0-9a-f]{2})\/([0-9a-f]{2})\/([0-9a-f]{64})\.(png|jpg|webp)$/.exec(key);
  if (!m || !m[3]!.startsWith(m[1]! + m[2]!)) return null;
  return { sha256: m[3]!, mime: MIME_OF_EXTENSION[m[4]!]! };
}

export interface SweepReport {
  /** Rows past their time (or evicted by max_bytes) deleted with their files. */
  expired: number;
  /** Files deleted because no row referenced them. */
  orphanFiles: number;
  /** Rows deleted because their file was missing. */
  orphanRows: number;
}

interface Logger {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

const BATCH = 500;
/** Keys of one sweep's listing kept in memory (about 150 bytes each); past it, rows' files are checked one by one. */
const LISTED_KEYS_REMEMBERED = 200_000;

export class ImageArchive implements ImageKeeper {
  private sweeping: Promise<SweepReport> | null = null;

  constructor(
    private readonly deps: { records: ImageRecords; blobs: ImageBlobStore; clock: Clock; logger: Logger; settings: ArchiveSettings },
  ) {}

  /** Keeps the image: the bytes (unless the same bytes are already there), then its row. */
  async put(image: NewImage): Promise<ArchivedImage> {
    const { records, blobs, clock, settings } = this.deps;
    const sha256 = sha256Hex(image.bytes);
    const key = blobKey(sha256, image.mime);
    const row = await records.withContent(sha256, async (rows) => {
      // Held from here to the row: no instance deletes the file between this look and the row.
      if (!(await blobs.exists(key))) await blobs.write(key, image.bytes);
      const now = clock();
      const row: ArchivedImage = {
        id: newId("img_"),
        requestId: image.requestId,
        userId: image.userId,
        mime: image.mime,
        bytes: image.bytes.byteLength,
        width: image.width,
        height: image.height,
        sha256,
        createdAt: now,
        expiresAt: settings.retentionDays > 0 ? now + settings.retentionDays * 86_400_000 : null,
      };
      await rows.insert(row);
      return row;
    });
    // Over budget, the oldest expire at once (their links stop working); the sweep deletes them.
    if (settings.maxBytes > 0) await records.expireOverBudget(settings.maxBytes, row.createdAt);
    return row;
  }

  /** The image and its bytes, or null when it does not exist, has expired or its file is gone. */
  async open(id: string): Promise<{ image: ArchivedImage; bytes: Uint8Array } | null> {
    const image = await this.deps.records.get(id);
    if (!image || (image.expiresAt !== null && image.expiresAt <= this.deps.clock())) return null;
    const bytes = await this.deps.blobs.read(blobKey(image.sha256, image.mime));
    return bytes ? { image, bytes } : null;
  }

  /**
   * Deletes one of the user's images (the gallery's Delete): its row, then its file when no
   * other row references the same bytes. The request and the ledger are untouched. False when
   * the image does not exist or is not theirs.
   */
  async deleteForUser(id: string, userId: number): Promise<boolean> {
    const image = await this.deps.records.get(id);
    if (!image || image.userId !== userId) return false;
    const unreferenced = await this.deps.records.remove([id]);
    for (const c of unreferenced) await this.removeIfUnreferenced(c.sha256, c.mime);
    return true;
  }

  /** One sweep at a time: a second call while one runs gets the same report. */
  sweep(): Promise<SweepReport> {
    this.sweeping ??= this.sweepOnce().finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<SweepReport> {
    const { records, blobs, clock, settings, logger } = this.deps;
    const report: SweepReport = { expired: 0, orphanFiles: 0, orphanRows: 0 };
    const now = clock();
    if (settings.maxBytes > 0) await records.expireOverBudget(settings.maxBytes, now);

    // Expired rows, then the files they alone referenced.
    for (;;) {
      const batch = await records.expired(now, BATCH);
      if (batch.length === 0) break;
      const unreferenced = await records.remove(batch.map((r) => r.id));
      report.expired += batch.length;
      for (const c of unreferenced) await this.removeIfUnreferenced(c.sha256, c.mime);
      if (batch.length < BATCH) break;
    }

    // Repair: files without a row (a crash between a put's write and its row, or mid-sweep).
    // The keys seen are remembered (up to a bound) so the next step need not ask the store about
    // each of them again: one HEAD per image per sweep is real money and time on a bucket.
    const listed = new Set<string>();
    for await (const { key, modifiedAt } of blobs.list()) {
      if (listed.size < LISTED_KEYS_REMEMBERED) listed.add(key);
      const content = parseBlobKey(key);
      if (!content || modifiedAt > now - settings.orphanGraceMs) continue;
      if (await this.removeIfUnreferenced(content.sha256, content.mime)) report.orphanFiles++;
    }

    // Repair: rows whose file is gone (lost outside us): their links could only fail. A file
    // the listing saw is there (any instance deletes a file only while holding its address and
    // seeing no row, and a row added after that wrote the file again); any other is checked
    // while holding its address, as a put may have written it since the listing.
    let after = "";
    for (;;) {
      const page = await records.contents(after, BATCH);
      for (const c of page) {
        const key = blobKey(c.sha256, c.mime);
        if (listed.has(key)) continue;
        const lost = await records.withContent(c.sha256, async (rows) => ((await blobs.exists(key)) ? 0 : rows.removeAll()));
        report.orphanRows += lost;
      }
      if (page.length < BATCH) break;
      after = page[page.length - 1]!.sha256;
    }
    if (report.orphanFiles > 0 || report.orphanRows > 0) logger.warn("image archive repaired", { orphan_files: report.orphanFiles, orphan_rows: report.orphanRows });
    return report;
  }

  private removeIfUnreferenced(sha256: string, mime: ImageMime): Promise<boolean> {
    // Held from the look for rows to the delete: a put elsewhere either added its row before
    // (the file stays) or looks for the file after (and writes it again).
    return this.deps.records.withContent(sha256, async (rows) => {
      if (await rows.referenced()) return false;
      await this.deps.blobs.remove(blobKey(sha256, mime));
      return true;
    });
  }
}

/**
 * Runs the archive's sweep every intervalMs (and once at start); the server starts and stops it.
 */
export class ImageSweeper {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private running: Promise<unknown> | null = null;

  constructor(
    private readonly archive: Pick<ImageArchive, "sweep">,
    private readonly intervalMs: number,
    private readonly logger: { error(msg: string, fields?: Record<string, unknown>): void },
  ) {}

  start(): void {
    if (this.timer) return;
    const tick = () => {
      this.running = this.archive
        .sweep()
        .catch((e) => this.logger.error("image sweep failed", { error: String(e) }))
        .finally(() => {
          this.running = null;
          // Capped (core/timerDelay): an interval past the timers' reach would re-run the sweep at once, in a loop.
          if (this.timer) this.timer = setTimeout(tick, timerDelay(this.intervalMs));
        });
    };
    this.timer = setTimeout(tick, 0);
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }
}
