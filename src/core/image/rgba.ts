/** The decoded form every codec produces and the built-in engine works on. */

/** 8-bit RGBA, row-major, no padding: `data.length === width * height * 4`. */
export interface Rgba {
  width: number;
  height: number;
  data: Uint8Array;
}

/**
 * The bytes are not a decodable image of the declared kind (corrupt, truncated, unsupported
 * variant such as an animated WebP, or larger than we are willing to decode). No `code`
 * property on purpose: Elysia's onError treats errors with one specially.
 */
export class ImageDecodeError extends Error {
  override name = "ImageDecodeError";
}

/**
 * Upper bound on decoded pixels. A 10 MiB PNG or WebP can legally claim dimensions whose RGBA
 * buffer is gigabytes (a decompression bomb); we read the header first and refuse above this.
 * 40 megapixels is 160 MB of RGBA, room for any real photo and for 16 edit inputs one at a time.
 */
export const MAX_DECODED_PIXELS = 40_000_000;

export function blankRgba(width: number, height: number): Rgba {
  return { width, height, data: new Uint8Array(width * height * 4) };
}
