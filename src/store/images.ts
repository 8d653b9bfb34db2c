/**
 * The image archive's rows (migration 5) and the server's own secrets. The bytes are not here:
 * see store/imageFiles.ts.
 */
import { randomBytes } from "node:crypto";
import type { SqlClient, SqlQueries } from "./sql";
import type { ArchivedImage, ImageRecords as ImageRecordsPort } from "../core/imageArchive";
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

export class ImageRecords implements ImageRecordsPort, ImageListing {
  constructor(private readonly sql: SqlClient) {}

  async insert(row: ArchivedImage): Promise<void> {
    await this.sql.run(
      `INSERT INTO images (id, request_id, user_id, mime, bytes, width, height, sha256, created_at, expires_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [row.id, row.requestId, row.userId, row.mime, row.bytes, row.width, row.height, row.sha256, row.createdAt, row.expiresAt],
    );
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

  async removeContent(sha256: string): Promise<number> {
    return (await this.sql.run("DELETE FROM images WHERE sha256 = ?", [sha256])).changes;
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

async function referencedBy(q: SqlQueries, sha256: string): Promise<boolean> {
  return (await q.get<{ one: number }>("SELECT 1 AS one FROM images WHERE sha256 = ? LIMIT 1", [sha256])) !== null;
}

type GalleryRow = ImageRow & { prompt: string | null; model: string | null };

const galleryFromRow = (r: GalleryRow): GalleryImage => ({ ...fromRow(r), prompt: r.prompt, model: r.model });

const GALLERY_SELECT = `SELECT images.*, requests.prompt AS prompt, requests.model AS model
  FROM images LEFT JOIN requests ON requests.id = images.request_id`;
const UNEXPIRED = "(images.expires_at IS NULL OR images.expires_at > ?)";

/** Secrets the server makes for itself, kept in the database so every process and restart shares them. */
export class ServerSecretStore {
  constructor(private readonly sql: SqlClient) {}

  /** The named secret, created (32 random bytes) on first use; two processes racing agree on one. */
  async getOrCreate(name: string, now: number): Promise<Uint8Array> {
    await this.sql.run("INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING", [name, randomBytes(32), now]);
    const row = await this.sql.get<{ value: Uint8Array }>("SELECT value FROM server_secrets WHERE name = ?", [name]);
    if (!row) throw new Error(`server secret ${name} is missing`);
    return new Uint8Array(row.value);
  }
}
