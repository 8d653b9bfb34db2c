/**
 * The one entry point for turning accepted image bytes into pixels and pixels into a PNG.
 * Callers pass the sniffed MIME type; the header is checked against MAX_DECODED_PIXELS before
 * any decoder allocates, and every decoder bounds its own work by what the header allows.
 *
 * Servers decode through decodeImageOffThread / verifyDecodesOffThread (a worker pool, see
 * decodePool.ts); decodeImage is the same decode on the calling thread, for the pool's workers
 * and for code whose images are known to be small.
 */
import type { ImageMime } from "../engine";
import { decodableDimensions, formatLabel, type Dimensions } from "./dimensions";
import { sharedDecodePool } from "./decodePool";
import { decodeJpeg } from "./jpeg";
import { decodePng } from "./png";
import { ImageDecodeError, type Rgba } from "./rgba";
import { decodeWebp } from "./webp";

export { encodePng, pngHasAlpha } from "./png";
export { decodableDimensions, readDimensions, type Dimensions } from "./dimensions";
export { ImageDecodeError, MAX_DECODED_PIXELS, type Rgba } from "./rgba";

export function decodeImage(bytes: Uint8Array, mime: ImageMime): Rgba {
  const dims = decodableDimensions(bytes, mime);
  const img = mime === "image/png" ? decodePng(bytes) : mime === "image/jpeg" ? decodeJpeg(bytes) : decodeWebp(bytes);
  // The header's size is what every check before the decode relied on (limits, masks, costs).
  if (img.width !== dims.width || img.height !== dims.height) {
    throw new ImageDecodeError(`${formatLabel(mime)} header says ${dims.width}x${dims.height} but it decodes to ${img.width}x${img.height}`);
  }
  if (img.data.length !== img.width * img.height * 4) {
    throw new ImageDecodeError(`${formatLabel(mime)} decoded to an inconsistent buffer`);
  }
  return img;
}

/** decodeImage in the shared worker pool: the event loop stays free meanwhile. */
export function decodeImageOffThread(bytes: Uint8Array, mime: ImageMime): Promise<Rgba> {
  return sharedDecodePool().decode(bytes, mime);
}

/**
 * A full decode in the shared worker pool whose pixels are dropped there: proves the bytes
 * decode, and resolves to the size they decode to.
 */
export function verifyDecodesOffThread(bytes: Uint8Array, mime: ImageMime): Promise<Dimensions> {
  return sharedDecodePool().verify(bytes, mime);
}
