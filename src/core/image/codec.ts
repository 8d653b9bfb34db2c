/**
 * The one entry point for turning accepted image bytes into pixels and pixels into a PNG.
 * Callers pass the sniffed MIME type; the header is checked against MAX_DECODED_PIXELS before
 * any decoder allocates.
 */
import type { ImageMime } from "../../engines/types";
import { readDimensions } from "./dimensions";
import { decodeJpeg } from "./jpeg";
import { decodePng } from "./png";
import { ImageDecodeError, MAX_DECODED_PIXELS, type Rgba } from "./rgba";
import { decodeWebp } from "./webp";

export { encodePng, pngHasAlpha } from "./png";
export { readDimensions, type Dimensions } from "./dimensions";
export { ImageDecodeError, MAX_DECODED_PIXELS, type Rgba } from "./rgba";

export function decodeImage(bytes: Uint8Array, mime: ImageMime): Rgba {
  const dims = readDimensions(bytes, mime);
  if (!dims) throw new ImageDecodeError(`not a decodable ${label(mime)}: its header is missing or malformed`);
  if (dims.width * dims.height > MAX_DECODED_PIXELS) {
    throw new ImageDecodeError(
      `${label(mime)} is ${dims.width}x${dims.height}; at most ${MAX_DECODED_PIXELS / 1_000_000} megapixels can be decoded`,
    );
  }
  const img = mime === "image/png" ? decodePng(bytes) : mime === "image/jpeg" ? decodeJpeg(bytes) : decodeWebp(bytes);
  if (img.data.length !== img.width * img.height * 4) {
    throw new ImageDecodeError(`${label(mime)} decoded to an inconsistent buffer`);
  }
  return img;
}

function label(mime: ImageMime): string {
  return mime === "image/png" ? "PNG" : mime === "image/jpeg" ? "JPEG" : "WebP";
}
