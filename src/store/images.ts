/**
 * The image archive's rows (migration 5) and the server's own secrets. The bytes are not here:
 * see store/imageFiles.ts.
 */
import { randomBytes } from "node:crypto";
import type { Db } from "./database";
import type { ArchivedImage, ImageRecords } from "../core/imageArchive";
import type { ImageMime } from "../core/engine";
import type { GalleryImage, ImageListing, ImageUsage } from "../core/imageGallery";

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

export class SqliteImageRecords implements ImageRecords, ImageListing {
  constructor(private readonly db: Db) {}

  insert(row: ArchivedImage): void {
    this.db
      .query(
        `INSERT INTO images (id, request_id, user_id, mime, bytes, width, height, sha256, created_at, expires_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(row.id, row.requestId, row.userId, row.mime, row.bytes, row.width, row.height, row.sha256, row.createdAt, row.expiresAt);
  }

  get(id: string): ArchivedImage | null {
    const r = this.db.query<ImageRow, [string]>("SELECT * FROM images WHERE id = ?").get(id);
    return r ? fromRow(r) : null;
  }

  expireOverBudget(maxBytes: number, now: number): number {
    // Newest first, a running total: every image past the budget expires now.
    return this.db
      .query(
        `UPDATE images SET expires_at = ?1 WHERE id IN (
           SELECT id FROM (
             SELECT id, SUM(bytes) OVER (ORDER BY created_at DESC, id DESC ROWS UNBOUNDED PRECEDING) AS kept
             FROM images WHERE expires_at IS NULL OR expires_at > ?1
           ) WHERE kept > ?2
         )`,
      )
      .run(now, maxBytes).changes;
  }

  expired(now: number, limit: number): ArchivedImage[] {
    return this.db
      .query<ImageRow, [number, number]>("SELECT * FROM images WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at, id LIMIT ?")
      .all(now, limit)
      .map(fromRow);
  }

  remove(ids: string[]): { sha256: string; mime: ImageMime }[] {
    return this.db
      .transaction(() => {
        const gone = new Map<string, ImageMime>();
        const del = this.db.query<{ sha256: string; mime: ImageMime }, [string]>("DELETE FROM images WHERE id = ? RETURNING sha256, mime");
        for (const id of ids) for (const r of del.all(id)) gone.set(r.sha256, r.mime);
        return [...gone].filter(([sha]) => !this.referenced(sha)).map(([sha256, mime]) => ({ sha256, mime }));
      })
      .immediate();
  }

  referenced(sha256: string): boolean {
    return this.db.query<{ one: number }, [string]>("SELECT 1 AS one FROM images WHERE sha256 = ? LIMIT 1").get(sha256) !== null;
  }

  contents(after: string, limit: number): { sha256: string; mime: ImageMime }[] {
    return this.db
      .query<{ sha256: string; mime: ImageMime }, [string, number]>("SELECT sha256, MIN(mime) AS mime FROM images WHERE sha256 > ? GROUP BY sha256 ORDER BY sha256 LIMIT ?")
      .all(after, limit);
  }

  removeContent(sha256: string): number {
    return this.db.query("DELETE FROM images WHERE sha256 = ?").run(sha256).changes;
  }

  listForUser(userId: number, now: number, limit: number, offset: number): GalleryImage[] {
    return this.db
      .query<GalleryRow, [number, number, number, number]>(
        `${GALLERY_SELECT} WHERE images.user_id = ? AND ${UNEXPIRED} ORDER BY images.created_at DESC, images.id DESC LIMIT ? OFFSET ?`,
      )
      .all(userId, now, limit, offset)
      .map(galleryFromRow);
  }

  countForUser(userId: number, now: number): number {
    return this.db.query<{ n: number }, [number, number]>(`SELECT COUNT(*) AS n FROM images WHERE user_id = ? AND ${UNEXPIRED}`).get(userId, now)!.n;
  }

  getForUser(id: string, userId: number, now: number): GalleryImage | null {
    const r = this.db.query<GalleryRow, [string, number, number]>(`${GALLERY_SELECT} WHERE images.id = ? AND images.user_id = ? AND ${UNEXPIRED}`).get(id, userId, now);
    return r ? galleryFromRow(r) : null;
  }

  imageIdsForRequests(userId: number, requestIds: string[], now: number): Map<string, string> {
    const out = new Map<string, string>();
    if (requestIds.length === 0) return out;
    const rows = this.db
      .query<{ request_id: string; id: string }, (string | number)[]>(
        `SELECT request_id, id FROM images WHERE user_id = ? AND ${UNEXPIRED} AND request_id IN (${requestIds.map(() => "?").join(", ")})
         ORDER BY created_at, id`,
      )
      .all(userId, now, ...requestIds);
    for (const r of rows) if (!out.has(r.request_id)) out.set(r.request_id, r.id);
    return out;
  }

  usageByUser(): Map<number, ImageUsage> {
    const rows = this.db
      .query<{ user_id: number; images: number; bytes: number }, []>("SELECT user_id, COUNT(*) AS images, SUM(bytes) AS bytes FROM images GROUP BY user_id")
      .all();
    return new Map(rows.map((r) => [r.user_id, { userId: r.user_id, images: r.images, bytes: r.bytes }]));
  }
}


type GalleryRow = ImageRow & { prompt: string | null; model: string | null };

const galleryFromRow = (r: GalleryRow): GalleryImage => ({ ...fromRow(r), prompt: r.prompt, model: r.model });

const GALLERY_SELECT = `SELECT images.*, requests.prompt AS prompt, requests.model AS model
  FROM images LEFT JOIN requests ON requests.id = images.request_id`;
const UNEXPIRED = "(images.expires_at IS NULL OR images.expires_at > ?)";

/** Secrets the server makes for itself, kept in the database so every process and restart shares them. */
export class ServerSecretStore {
  constructor(private readonly db: Db) {}

  /** The named secret, created (32 random bytes) on first use; two processes racing agree on one. */
  getOrCreate(name: string, now: number): Uint8Array {
    this.db.query("INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING").run(name, randomBytes(32), now);
    const row = this.db.query<{ value: Uint8Array }, [string]>("SELECT value FROM server_secrets WHERE name = ?").get(name);
    if (!row) throw new Error(`server secret ${name} is missing`);
    return new Uint8Array(row.value);
  }
}
