/**
 * Gallery thumbnails, made on the fly and cached: the kept image is decoded in the decode pool,
 * box-filtered down to at most THUMBNAIL_MAX_SIDE on its longer side, encoded as PNG, and the
 * bytes kept in a bounded in-memory LRU keyed by the image's sha256 (content addressed: the
 * same bytes always give the same thumbnail, so the key never goes stale). Concurrent requests
 * for one thumbnail share one decode. An image already small enough is served as it is.
 *
 * Access control is the caller's: this only turns an archived image into thumbnail bytes.
 */
import type { ImageMime } from "./engine";
import type { ArchivedImage } from "./imageArchive";
import type { Rgba } from "./image/codec";

export const THUMBNAIL_MAX_SIDE = 256;

export interface Thumbnail {
  bytes: Uint8Array;
  mime: ImageMime;
  /** Quoted, for the ETag header. */
  etag: string;
}

/**
 * Area-average downscale (each output pixel is the alpha-weighted mean of the source pixels it
 * covers) so that the longer side is at most maxSide. Never upscales.
 */
export function downscale(img: Rgba, maxSide: number): Rgba {
  const scale = Math.min(1, maxSide / Math.max(img.width, img.height));
  const w = Math.max(1, Math.round(img.width * scale));
  const h = Math.max(1, Math.round(img.height * scale));
  if (w === img.width && h === img.height) return img;
  const out = new Uint8Array(w * h * 4);
  const sx = img.width / w;
  const sy = img.height / h;
  const src = img.data;
  for (let y = 0; y < h; y++) {
    const y0 = Math.floor(y * sy);
    const y1 = Math.max(y0 + 1, Math.floor((y + 1) * sy));
    for (let x = 0; x < w; x++) {
      const x0 = Math.floor(x * sx);
      const x1 = Math.max(x0 + 1, Math.floor((x + 1) * sx));
      let r = 0, g = 0, b = 0, a = 0, n = 0;
      for (let yy = y0; yy < y1; yy++) {
        let i = (yy * img.width + x0) * 4;
        for (let xx = x0; xx < x1; xx++, i += 4) {
          const alpha = src[i + 3]!;
          r += src[i]! * alpha;
          g += src[i + 1]! * alpha;
          b += src[i + 2]! * alpha;
          a += alpha;
          n++;
        }
      }
      const o = (y * w + x) * 4;
      if (a > 0) {
        out[o] = Math.round(r / a);
        out[o + 1] = Math.round(g / a);
        out[o + 2] = Math.round(b / a);
      }
      out[o + 3] = Math.round(a / n);
    }
  }
  return { width: w, height: h, data: out };
}

export interface ThumbnailDeps {
  /** The image's bytes (null when its file is gone). */
  read(image: ArchivedImage): Promise<Uint8Array | null>;
  decode(bytes: Uint8Array, mime: ImageMime): Promise<Rgba>;
  encodePng(img: Rgba): Uint8Array;
  /** The LRU's bound, in thumbnail bytes. */
  maxCacheBytes: number;
}

export class ImageThumbnails {
  private readonly cache = new Map<string, Thumbnail>();
  private cachedBytes = 0;
  private readonly pending = new Map<string, Promise<Thumbnail | null>>();

  constructor(private readonly deps: ThumbnailDeps) {}

  /** The thumbnail of a kept image, or null when its bytes are gone. */
  thumbnailOf(image: ArchivedImage): Promise<Thumbnail | null> {
    const hit = this.cache.get(image.sha256);
    if (hit) {
      // Most recently used goes to the end of the Map's order.
      this.cache.delete(image.sha256);
      this.cache.set(image.sha256, hit);
      return Promise.resolve(hit);
    }
    let p = this.pending.get(image.sha256);
    if (!p) {
      p = this.make(image).finally(() => this.pending.delete(image.sha256));
      this.pending.set(image.sha256, p);
    }
    return p;
  }

  /** How many thumbnails and bytes the cache holds (for tests and diagnostics). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.cache.size, bytes: this.cachedBytes };
  }

  private async make(image: ArchivedImage): Promise<Thumbnail | null> {
    const original = await this.deps.read(image);
    if (!original) return null;
    let thumb: Thumbnail;
    if (Math.max(image.width, image.height) <= THUMBNAIL_MAX_SIDE) {
      thumb = { bytes: original, mime: image.mime, etag: `"${image.sha256}"` };
    } else {
      const pixels = await this.deps.decode(original, image.mime);
      const bytes = this.deps.encodePng(downscale(pixels, THUMBNAIL_MAX_SIDE));
      thumb = { bytes, mime: "image/png", etag: `"t${THUMBNAIL_MAX_SIDE}-${image.sha256}"` };
    }
    this.remember(image.sha256, thumb);
    return thumb;
  }

  private remember(key: string, thumb: Thumbnail): void {
    if (thumb.bytes.byteLength > this.deps.maxCacheBytes) return;
    this.cache.set(key, thumb);
    this.cachedBytes += thumb.bytes.byteLength;
    for (const [k, v] of this.cache) {
      if (this.cachedBytes <= this.deps.maxCacheBytes) break;
      this.cache.delete(k);
      this.cachedBytes -= v.bytes.byteLength;
    }
  }
}
