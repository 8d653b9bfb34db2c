/**
 * The image archive's rows (migration 5) and the server's own secrets. The bytes are not here:
 * see store/imageFiles.ts.
 */
import type { SqlClient, SqlQueries } from "./sql";
import type { ArchivedImage, ContentRecords, ImageRecords as ImageRecordsPort } from "../core/imageArchive";
import type { ImageMime } from "../core/engine";
import type { GalleryImage, ImageListing, ImageUsage } from "../core/imageGallery";
import { KeyedLock } from "../core/keyedLock";

interface ImageRow {
  id: string;
  request_id: string;
  user_id: number;
  mime: ImageMime;
  bytes: number;
  width: number;
  height: number;
  sha256: string;
  created_at: number;
  expires_at: number | null;
}

function fromRow(r: ImageRow): ArchivedImage {
  return {
    id: r.id,
    requestId: r.request_id,
    userId: r.user_id,
    mime: r.mime,
    bytes: r.bytes,
    width: r.width,
    height: r.height,
    sha256: r.sha256,
    createdAt: r.created_at,
    expiresAt: r.expires_at,
  };
}

/** PostgreSQL's advisory locks of image contents: the two-key form (a key space apart from the one-key locks), this class and 32 bits of the sha256. */
const CONTENT_LOCK_CLASS = 0x61746963; // "atic"

/** The second key: the sha256's first 32 bits as a signed int4. Two contents sharing it only wait for each other. */
const contentLockKey = (sha256: string): number => Number.parseInt(sha256.slice(0, 8), 16) | 0;

export class ImageRecords implements ImageRecordsPort, ImageListing {
  /** This process's holders of a content address, in line. */
  private readonly held = new KeyedLock();

  constructor(private readonly sql: SqlClient) {}

  /**
   * Holds the content address for fn. In this process, holders queue in memory: on PostgreSQL
   * a second holder of one address then waits without a pooled connection. Then:
   * - PostgreSQL (instances sharing the rows): a transaction takes pg_advisory_xact_lock on the
   *   address, fn's statements run in it, and the lock goes with the commit, so the next holder
   *   (on any instance) sees fn's rows. The transaction stays open over fn's file calls, a
   *   connection held per address being written or deleted (bounded by the blob store's timeout).
   * - SQLite: an embedded server is the only process on its database (the server lock), so the
   *   queue is the whole hold. No transaction: the one connection would stop every other
   *   statement of the process for the length of a file write.
   */
  withContent<T>(sha256: string, fn: (rows: ContentRecords) => Promise<T>): Promise<T> {
    return this.held.run(sha256, () => {
      if (this.sql.dialect !== "postgres") return fn(contentRecords(this.sql, sha256));
      return this.sql.transaction(async (tx) => {
        await tx.get(`SELECT pg_advisory_xact_lock(${CONTENT_LOCK_CLASS}, CAST(? AS INTEGER))`, [contentLockKey(sha256)]);
        return fn(contentRecords(tx, sha256));
      });
    });
  }

  /** A row as it is, without holding its content (tests, imports); the archive adds rows through withContent. */
  insert(row: ArchivedImage): Promise<void> {
    return insertRow(this.sql, row);
  }

  async get(id: string): Promise<ArchivedImage | null> {
    const r = await this.sql.get<ImageRow>("SELECT * FROM images WHERE id = ?", [id]);
    return r ? fromRow(r) : null;
  }

  async expireOverBudget(maxBytes: number, now: number): Promise<number> {
    // Newest first, a running total: every image past the budget expires now.
    const { changes } = await this.sql.run(
      `UPDATE images SET expires_at = ? WHERE id IN (
         SELECT id FROM (
           SELECT id, CAST(SUM(bytes) OVER (ORDER BY created_at DESC, id DESC ROWS UNBOUNDED PRECEDING) AS BIGINT) AS kept
           FROM images WHERE expires_at IS NULL OR expires_at > ?
         ) AS running WHERE kept > ?
       )`,
      [now, now, maxBytes],
    );
    return changes;
  }

  async expired(now: number, limit: number): Promise<ArchivedImage[]> {
    const rows = await this.sql.all<ImageRow>("SELECT * FROM images WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at, id LIMIT ?", [now, limit]);
    return rows.map(fromRow);
  }

  async remove(ids: string[]): Promise<{ sha256: string; mime: ImageMime }[]> {
    return this.sql.transaction(async (tx) => {
      const gone = new Map<string, ImageMime>();
      for (const id of ids) {
        for (const r of await tx.all<{ sha256: string; mime: ImageMime }>("DELETE FROM images WHERE id = ? RETURNING sha256, mime", [id])) gone.set(r.sha256, r.mime);
      }
      const unreferenced: { sha256: string; mime: ImageMime }[] = [];
      for (const [sha256, mime] of gone) if (!(await referencedBy(tx, sha256))) unreferenced.push({ sha256, mime });
      return unreferenced;
    });
  }

  /** Whether any row references these bytes (a passing answer: the archive asks through withContent). */
  referenced(sha256: string): Promise<boolean> {
    return referencedBy(this.sql, sha256);
  }

  contents(after: string, limit: number): Promise<{ sha256: string; mime: ImageMime }[]> {
    // sha256 is lowercase hex, so the engines' orders of it agree.
    return this.sql.all<{ sha256: string; mime: ImageMime }>(
      "SELECT sha256, MIN(mime) AS mime FROM images WHERE sha256 > ? GROUP BY sha256 ORDER BY sha256 LIMIT ?",
      [after, limit],
    );
  }

  /** Deletes every row of these bytes, without holding them (the archive does it through withContent). */
  removeContent(sha256: string): Promise<number> {
    return removeContentIn(this.sql, sha256);
  }

  async listForUser(userId: number, now: number, limit: number, offset: number): Promise<GalleryImage[]> {
    const rows = await this.sql.all<GalleryRow>(
      `${GALLERY_SELECT} WHERE images.user_id = ? AND ${UNEXPIRED} ORDER BY images.created_at DESC, images.id DESC LIMIT ? OFFSET ?`,
      [userId, now, limit, offset],
    );
    return rows.map(galleryFromRow);
  }

  async countForUser(userId: number, now: number): Promise<number> {
    return (await this.sql.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM images WHERE user_id = ? AND ${UNEXPIRED}`, [userId, now]))?.n ?? 0;
  }

  async getForUser(id: string, userId: number, now: number): Promise<GalleryImage | null> {
    const r = await this.sql.get<GalleryRow>(`${GALLERY_SELECT} WHERE images.id = ? AND images.user_id = ? AND ${UNEXPIRED}`, [id, userId, now]);
    return r ? galleryFromRow(r) : null;
  }

  async imageIdsForRequests(userId: number, requestIds: string[], now: number): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    if (requestIds.length === 0) return out;
    const rows = await this.sql.all<{ request_id: string; id: string }>(
      `SELECT request_id, id FROM images WHERE user_id = ? AND ${UNEXPIRED} AND request_id IN (${requestIds.map(() => "?").join(", ")})
       ORDER BY created_at, id`,
      [userId, now, ...requestIds],
    );
    for (const r of rows) if (!out.has(r.request_id)) out.set(r.request_id, r.id);
    return out;
  }

  async usageByUser(): Promise<Map<number, ImageUsage>> {
    const rows = await this.sql.all<{ user_id: number; images: number; bytes: number }>(
      "SELECT user_id, CAST(COUNT(*) AS BIGINT) AS images, CAST(SUM(bytes) AS BIGINT) AS bytes FROM images GROUP BY user_id ORDER BY user_id",
    );
    return new Map(rows.map((r) => [r.user_id, { userId: r.user_id, images: r.images, bytes: r.bytes }]));
  }
}

async function insertRow(q: SqlQueries, row: ArchivedImage): Promise<void> {
  await q.run(
    `INSERT INTO images (id, request_id, user_id, mime, bytes, width, height, sha256, created_at, expires_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [row.id, row.requestId, row.userId, row.mime, row.bytes, row.width, row.height, row.sha256, row.createdAt, row.expiresAt],
  );
}

async function referencedBy(q: SqlQueries, sha256: string): Promise<boolean> {
  return (await q.get<{ one: number }>("SELECT 1 AS one FROM images WHERE sha256 = ? LIMIT 1", [sha256])) !== null;
}

async function removeContentIn(q: SqlQueries, sha256: string): Promise<number> {
  return (await q.run("DELETE FROM images WHERE sha256 = ?", [sha256])).changes;
}

/** The statements of one held content address, on the holder's connection (its transaction on PostgreSQL). */
function contentRecords(q: SqlQueries, sha256: string): ContentRecords {
  return {
    insert: (row) => {
      // A row of other bytes would be added without their hold.
      if (row.sha256 !== sha256) throw new Error(`a row of ${row.sha256} added while holding ${sha256}`);
      return insertRow(q, row);
    },
    referenced: () => referencedBy(q, sha256),
    removeAll: () => removeContentIn(q, sha256),
  };
}

type GalleryRow = ImageRow & { prompt: string | null; model: string | null };

const galleryFromRow = (r: GalleryRow): GalleryImage => ({ ...fromRow(r), prompt: r.prompt, model: r.model });

const GALLERY_SELECT = `SELECT images.*, requests.prompt AS prompt, requests.model AS model
  FROM images LEFT JOIN requests ON requests.id = images.request_id`;
const UNEXPIRED = "(images.expires_at IS NULL OR images.expires_at > ?)";

