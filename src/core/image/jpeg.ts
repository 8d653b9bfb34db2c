/**
 * JPEG through jpeg-js (pure JS, baseline and progressive); output is RGBA with alpha 255.
 *
 * Memory is bounded by jpeg-js itself (maxResolutionInMP, maxMemoryUsageInMB: it counts its
 * coefficient blocks, component lines and output before allocating them). Time is not: every
 * progressive scan walks all blocks of its components, and a scan made of end-of-band runs is
 * a few dozen bytes, so 10 MB of them is hours of work for one 40-megapixel picture. Hence the
 * scan limit, checked by a cheap marker walk before jpeg-js sees the bytes.
 */
import { decode } from "jpeg-js";
import { ImageDecodeError, MAX_DECODED_PIXELS, type Rgba } from "./rgba";

/**
 * Encoders write 1 scan (baseline) or about 10 (libjpeg's progressive script; optimisers such
 * as mozjpeg stay in the same range). 100 leaves room for any of them; one scan over 40
 * megapixels costs about 5 ms, so the worst accepted file costs about what a big decode does.
 */
export const MAX_JPEG_SCANS = 100;

/** jpeg-js's memory accounting limit: RGBA at our pixel limit, twice, for its other buffers. */
export const JPEG_MEMORY_LIMIT_BYTES = MAX_DECODED_PIXELS * 4 * 2;

export function decodeJpeg(bytes: Uint8Array): Rgba {
  if (countJpegScans(bytes) > MAX_JPEG_SCANS) {
    throw new ImageDecodeError(`JPEG has more than ${MAX_JPEG_SCANS} scans; at most ${MAX_JPEG_SCANS} are decoded`);
  }
  try {
    const img = decode(bytes, {
      useTArray: true,
      formatAsRGBA: true,
      // jpeg-js enforces its own bounds too; align them with ours.
      maxResolutionInMP: MAX_DECODED_PIXELS / 1_000_000,
      maxMemoryUsageInMB: Math.ceil(JPEG_MEMORY_LIMIT_BYTES / 1_048_576),
    });
    return { width: img.width, height: img.height, data: img.data };
  } catch (e) {
    throw new ImageDecodeError(`not a decodable JPEG: ${(e as Error).message}`);
  }
}

/**
 * Start-of-scan markers, counted by walking marker segments and skipping each scan's
 * entropy-coded data (which ends at the first 0xFF not followed by 0x00, a restart marker or
 * fill). Stops counting once past the limit, or at end of image; a malformed walk stops and
 * leaves the verdict to the decoder.
 */
export function countJpegScans(b: Uint8Array): number {
  let scans = 0;
  let i = 2;
  while (i + 4 <= b.length && scans <= MAX_JPEG_SCANS) {
    if (b[i] !== 0xff) return scans;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i += 1; // fill byte
      continue;
    }
    if (marker === 0xd9) return scans; // end of image
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2;
      continue;
    }
    const length = (b[i + 2]! << 8) | b[i + 3]!;
    if (length < 2) return scans;
    i += 2 + length;
    if (marker !== 0xda) continue;
    scans++;
    while (i + 1 < b.length && !(b[i] === 0xff && b[i + 1] !== 0x00 && !(b[i + 1]! >= 0xd0 && b[i + 1]! <= 0xd7))) i++;
  }
  return scans;
}
