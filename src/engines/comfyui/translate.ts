/**
 * Our image jobs as ComfyUI field values (what fills the workflow's placeholders and bindings),
 * and the mask in ComfyUI's convention.
 *
 * Masks: OpenAI marks the area to repaint with transparency (alpha < 128). ComfyUI's
 * /upload/mask copies the uploaded mask's alpha channel into the original image, and LoadImage
 * then yields MASK = 1 − alpha, i.e. alpha 0 = repaint. So the conversion keeps the meaning
 * and hardens it: alpha < 128 becomes 0 (repaint), every other pixel 255 (keep), RGB black.
 */
import type { ImageJob } from "../../core/engine";
import { decodeImageOffThread, encodePng } from "../../core/image/codec";
import type { ImageInput } from "../../core/engine";
import { stepsForQuality } from "../sdwebui/translate";
import type { ComfyField } from "./workflow";

export const DEFAULT_SIDE = 1024;
/** denoise of an image-to-image run (reference images or an edit) unless params.denoise says otherwise. */
export const DEFAULT_IMAGE_DENOISE = 0.75;
export const TRANSPARENT_BELOW = 128;

/** Every field's value except image and mask (those are upload names, known per attempt). */
export function fieldValues(job: ImageJob, random: () => number = Math.random): Partial<Record<ComfyField, string | number>> {
  const params = job.model.params;
  const base = job.images[0];
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  return {
    prompt: job.prompt,
    negative_prompt: typeof params.negative_prompt === "string" ? params.negative_prompt : "",
    seed: num(params.seed) ?? Math.floor(random() * 2 ** 32),
    width: job.size?.width ?? num(params.width) ?? base?.width ?? DEFAULT_SIDE,
    height: job.size?.height ?? num(params.height) ?? base?.height ?? DEFAULT_SIDE,
    steps: stepsForQuality(job.quality, params),
    denoise: num(params.denoise) ?? (base ? DEFAULT_IMAGE_DENOISE : 1),
  };
}

/** An OpenAI mask as the PNG ComfyUI's /upload/mask takes: same size, alpha 0 = repaint, 255 = keep. */
export async function comfyMaskFromOpenAI(mask: ImageInput): Promise<Uint8Array> {
  const rgba = await decodeImageOffThread(mask.bytes, mask.mime);
  const out = new Uint8Array(rgba.width * rgba.height * 4);
  for (let i = 0; i < out.length; i += 4) out[i + 3] = rgba.data[i + 3]! < TRANSPARENT_BELOW ? 0 : 255;
  return encodePng({ width: rgba.width, height: rgba.height, data: out });
}
