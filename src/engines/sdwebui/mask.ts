/**
 * Mask conventions differ: OpenAI's mask marks the area to repaint with transparency, the
 * Stable Diffusion WebUI's with white. This turns the one into the other.
 */
import { decodeImageOffThread, encodePng } from "../../core/image/codec";
import type { ImageInput } from "../../core/engine";

/** Alpha below this counts as transparent (to repaint); half-way keeps soft edges fair. */
export const TRANSPARENT_BELOW = 128;

/**
 * An OpenAI mask (alpha < 128 = edit here) as a WebUI mask: an opaque PNG of the same size,
 * white where the WebUI must repaint, black where it must keep the picture.
 * Decodes in the decode pool, like every decode on the request path.
 */
export async function webuiMaskFromOpenAI(mask: ImageInput): Promise<Uint8Array> {
  const rgba = await decodeImageOffThread(mask.bytes, mask.mime);
  const out = new Uint8Array(rgba.width * rgba.height * 4);
  for (let i = 0; i < out.length; i += 4) {
    const v = rgba.data[i + 3]! < TRANSPARENT_BELOW ? 255 : 0;
    out[i] = v;
    out[i + 1] = v;
    out[i + 2] = v;
    out[i + 3] = 255;
  }
  return encodePng({ width: rgba.width, height: rgba.height, data: out });
}
