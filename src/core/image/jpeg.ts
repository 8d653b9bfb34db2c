/** JPEG through jpeg-js (pure JS, baseline and progressive); output is RGBA with alpha 255. */
import { decode } from "jpeg-js";
import { ImageDecodeError, MAX_DECODED_PIXELS, type Rgba } from "./rgba";

export function decodeJpeg(bytes: Uint8Array): Rgba {
  try {
    const img = decode(bytes, {
      useTArray: true,
      formatAsRGBA: true,
      // jpeg-js enforces its own bounds too; align them with ours (plus headroom for its buffers).
      maxResolutionInMP: MAX_DECODED_PIXELS / 1_000_000,
      maxMemoryUsageInMB: Math.ceil((MAX_DECODED_PIXELS * 4 * 2) / 1_048_576),
    });
    return { width: img.width, height: img.height, data: img.data };
  } catch (e) {
    throw new ImageDecodeError(`not a decodable JPEG: ${(e as Error).message}`);
  }
}
