/**
 * Reads an image's dimensions from its header alone, without decoding pixels, so a decoder is
 * never asked to allocate for a size we would refuse. Returns null when the header is not
 * where the format puts it.
 */
import type { ImageMime } from "../engine";
import { ImageDecodeError, MAX_DECODED_PIXELS } from "./rgba";

export interface Dimensions {
  width: number;
  height: number;
}

export function readDimensions(bytes: Uint8Array, mime: ImageMime): Dimensions | null {
  switch (mime) {
    case "image/png":
      return pngDimensions(bytes);
    case "image/jpeg":
      return jpegDimensions(bytes);
    case "image/webp":
      return webpDimensions(bytes);
  }
}

/**
 * The header's dimensions if a decoder may be asked to decode these bytes: the header is
 * readable and claims at most MAX_DECODED_PIXELS. Throws ImageDecodeError otherwise.
 */
export function decodableDimensions(bytes: Uint8Array, mime: ImageMime): Dimensions {
  const dims = readDimensions(bytes, mime);
  if (!dims) throw new ImageDecodeError(`not a decodable ${formatLabel(mime)}: its header is missing or malformed`);
  if (dims.width * dims.height > MAX_DECODED_PIXELS) {
    throw new ImageDecodeError(
      `${formatLabel(mime)} is ${dims.width}x${dims.height}; at most ${MAX_DECODED_PIXELS / 1_000_000} megapixels can be decoded`,
    );
  }
  return dims;
}

export function formatLabel(mime: ImageMime): string {
  return mime === "image/png" ? "PNG" : mime === "image/jpeg" ? "JPEG" : "WebP";
}

const view = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);

/** PNG: the IHDR chunk must come first, right after the 8-byte signature. */
function pngDimensions(b: Uint8Array): Dimensions | null {
  if (b.length < 24) return null;
  const v = view(b);
  if (ascii(b, 12, 4) !== "IHDR") return null;
  return positive(v.getUint32(16), v.getUint32(20));
}

/** JPEG: walk the marker segments up to the first start-of-frame (SOF0..SOF15 except DHT/JPG/DAC). */
function jpegDimensions(b: Uint8Array): Dimensions | null {
  if (b.length < 4 || b[0] !== 0xff || b[1] !== 0xd8) return null;
  const v = view(b);
  let i = 2;
  while (i + 4 <= b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i += 1; // fill byte
      continue;
    }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2; // markers without a length
      continue;
    }
    const length = v.getUint16(i + 2);
    const isSof = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
    if (isSof) {
      if (i + 9 > b.length) return null;
      return positive(v.getUint16(i + 7), v.getUint16(i + 5));
    }
    if (length < 2) return null;
    i += 2 + length;
  }
  return null;
}

/** WebP: RIFF header, then a VP8 (lossy), VP8L (lossless) or VP8X (extended) chunk at offset 12. */
function webpDimensions(b: Uint8Array): Dimensions | null {
  if (b.length < 30 || ascii(b, 0, 4) !== "RIFF" || ascii(b, 8, 4) !== "WEBP") return null;
  const v = view(b);
  const chunk = ascii(b, 12, 4);
  if (chunk === "VP8X") {
    const w = 1 + (b[24]! | (b[25]! << 8) | (b[26]! << 16));
    const h = 1 + (b[27]! | (b[28]! << 8) | (b[29]! << 16));
    return positive(w, h);
  }
  if (chunk === "VP8L") {
    if (b[20] !== 0x2f) return null;
    const bits = v.getUint32(21, true);
    return positive((bits & 0x3fff) + 1, ((bits >>> 14) & 0x3fff) + 1);
  }
  if (chunk === "VP8 ") {
    // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height.
    if (b[23] !== 0x9d || b[24] !== 0x01 || b[25] !== 0x2a) return null;
    return positive(v.getUint16(26, true) & 0x3fff, v.getUint16(28, true) & 0x3fff);
  }
  return null;
}

function ascii(b: Uint8Array, at: number, n: number): string {
  return String.fromCharCode(...b.subarray(at, at + n));
}

function positive(width: number, height: number): Dimensions | null {
  return width > 0 && height > 0 ? { width, height } : null;
}
