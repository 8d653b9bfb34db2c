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
import { ImageDecodeError, MAX_DECODED_PIXELS, type Rgba } from "./rgba";
import { checkImageStructure } from "./structure";
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

/**
 * An image scaled down to width x height (aspect not kept: the caller picks the sides) and
 * decoded to RGBA. Decoding and scaling run in Bun's native image pipeline (libspng,
 * libjpeg-turbo, libwebp; off the JS thread), so a 10 MB upload costs a few tens of
 * milliseconds and never its full-size RGBA on the JS heap; the small result comes back as a
 * stored PNG, decoded in the pool. Null when that fails in any way (the caller then decodes
 * the bytes itself, with the bounded decoders and their error messages). For inputs already
 * checked (verifyUploadOffThread); the pixel limit holds here too.
 */
export async function decodeScaledDown(bytes: Uint8Array, width: number, height: number): Promise<Rgba | null> {
  try {
    const small = await new Bun.Image(bytes, { maxPixels: MAX_DECODED_PIXELS, autoOrient: false }).resize(width, height).png({ compressionLevel: 0 }).bytes();
    const img = await decodeImageOffThread(small, "image/png");
    return img.width === width && img.height === height ? img : null;
  } catch {
    return null;
  }
}

/** decodeImage in the shared worker pool: the event loop stays free meanwhile. */
export function decodeImageOffThread(bytes: Uint8Array, mime: ImageMime): Promise<Rgba> {
  return sharedDecodePool().decode(bytes, mime);
}

/**
 * An upload proved decodable with as little decoding as its format allows: the structure on the
 * calling thread (image/structure: chunks and CRCs, markers, RIFF sizes), then the image data
 * in the shared worker pool where only decoding tells (a PNG's bounded inflate; JPEG and WebP
 * entropy-coded data is left to the decoder that needs the pixels).
 */
export async function verifyUploadOffThread(bytes: Uint8Array, mime: ImageMime): Promise<void> {
  checkImageStructure(bytes, mime);
  if (mime === "image/png") await sharedDecodePool().verifyData(bytes, mime);
}

/**
 * A full decode in the shared worker pool whose pixels are dropped there: proves the bytes
 * decode, and resolves to the size they decode to.
 */
export function verifyDecodesOffThread(bytes: Uint8Array, mime: ImageMime): Promise<Dimensions> {
  return sharedDecodePool().verify(bytes, mime);
}
