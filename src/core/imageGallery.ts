/**
 * The gallery's view of the image archive: a user's kept images newest first (with the prompt
 * and model of the request that made them), which requests have an image, and storage use per
 * user. Only unexpired images are shown: an expired one is already gone for its links and the
 * sweep deletes it. The queries live in store/images.ts.
 */
import type { ArchivedImage } from "./imageArchive";

export interface GalleryImage extends ArchivedImage {
  /** From the request that made it (null if that row is gone). */
  prompt: string | null;
  model: string | null;
}

export interface ImageUsage {
  userId: number;
  images: number;
  bytes: number;
}

/** Read queries over the archive's rows (implemented in store/images.ts). */
export interface ImageListing {
  /** The user's unexpired images, newest first. */
  listForUser(userId: number, now: number, limit: number, offset: number): Promise<GalleryImage[]>;
  countForUser(userId: number, now: number): Promise<number>;
  /** One of the user's unexpired images, or null (another user's image is null too). */
  getForUser(id: string, userId: number, now: number): Promise<GalleryImage | null>;
  /** request id → the (first) unexpired image it made, for these requests of this user. */
  imageIdsForRequests(userId: number, requestIds: string[], now: number): Promise<Map<string, string>>;
  /** Rows kept per user (expired rows not yet swept included: they still take space). */
  usageByUser(): Promise<Map<number, ImageUsage>>;
}

/** "1.2 MB": decimal units, one decimal from kB up. */
export function formatBytes(n: number): string {
  if (n < 1000) return `${n} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let v = n / 1000;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}
