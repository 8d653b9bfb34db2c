/**
 * Our job's pieces in the shapes queue APIs take: images as data URIs, the mask converted to
 * the white-repaints convention, the size as width/height or an aspect ratio, params passed
 * through without overriding the fields we compute.
 */
import type { ImageInput, ImageJob } from "../../core/engine";
import { toBase64 } from "../../core/bytes";
import { webuiMaskFromOpenAI } from "../sdwebui/mask";

export function dataUri(img: Pick<ImageInput, "bytes" | "mime">): string {
  return `data:${img.mime};base64,${toBase64(img.bytes)}`;
}

/** The OpenAI mask (transparent = edit) as a PNG data URI where white = repaint (fal, Replicate, BFL). */
export async function whiteMaskDataUri(mask: ImageInput): Promise<string> {
  return dataUri({ bytes: await webuiMaskFromOpenAI(mask), mime: "image/png" });
}

/** The same mask as bare base64 (BFL's fill endpoint). */
export async function whiteMaskBase64(mask: ImageInput): Promise<string> {
  return toBase64(await webuiMaskFromOpenAI(mask));
}

/** The model's params minus the keys interpreted here and the fields we compute. */
export function passThrough(params: Record<string, unknown>, skip: ReadonlySet<string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(params)) if (!skip.has(k) && v !== undefined) out[k] = v;
  return out;
}

/** The aspect ratios the Flux APIs name; "w:h" reduced, when the size is one of them. */
export const ASPECT_RATIOS = new Set(["1:1", "16:9", "21:9", "3:2", "2:3", "4:5", "5:4", "3:4", "4:3", "9:16", "9:21"]);

export function aspectRatio(width: number, height: number): string {
  const g = gcd(width, height);
  return `${width / g}:${height / g}`;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** The model param naming the field reference images go in, else the kind's default. */
export function imageField(job: Pick<ImageJob, "model">, fallback: string): string {
  const v = job.model.params.image_field;
  return typeof v === "string" && v.length > 0 ? v : fallback;
}

/** Whether a field takes a list of images (`image_urls`, `image_input`) or one image. */
export function takesList(field: string): boolean {
  return field.endsWith("s") || field.endsWith("_input");
}

/** The reference-image problem of a field that takes one image, before the charge. */
export function tooManyImages(job: Pick<ImageJob, "images">, field: string, provider: string): { image: number; message: string } | null {
  if (job.images.length > 1 && !takesList(field)) {
    return { image: 1, message: `this ${provider} model takes one image in '${field}'; set the model's params.image_field to a list field (such as image_urls) for several` };
  }
  return null;
}
