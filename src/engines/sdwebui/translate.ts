/**
 * Our image jobs as WebUI payloads: txt2img or img2img, `size` → width/height, `quality` →
 * steps, the model's params passed through or interpreted, the mask converted (mask.ts); and
 * each attempt's own task id (`force_task_id`).
 */
import type { ImageJob } from "../../core/engine";
import { toBase64 } from "../../core/bytes";
import { webuiMaskFromOpenAI } from "./mask";
import type { WebUiEndpoint } from "./transport";
import { isPlainObject } from "../../core/values";
import { newId } from "../../core/ids";

/** Sampling steps per requested quality. More steps: finer detail, proportionally slower. */
export const QUALITY_STEPS: Record<string, number> = {
  low: 15,
  medium: 25,
  high: 40,
  standard: 25,
  hd: 40,
  auto: 25,
};

export const DEFAULT_SIDE = 1024;
export const DEFAULT_DENOISING_STRENGTH = 0.75;

/** Keys of [[models]].params that are interpreted here instead of passed through. */
const INTERPRETED_PARAMS = new Set(["checkpoint", "steps", "width", "height", "override_settings"]);
/** Fields computed here (or, force_task_id, per attempt); params cannot override them. */
const COMPUTED_FIELDS = new Set(["prompt", "init_images", "mask", "batch_size", "n_iter", "send_images", "save_images", "force_task_id"]);

export function stepsForQuality(quality: string, params: Record<string, unknown>): number {
  if ((quality === "auto" || quality === "") && typeof params.steps === "number" && params.steps > 0) return Math.round(params.steps);
  return QUALITY_STEPS[quality] ?? QUALITY_STEPS.auto!;
}

export interface WebUiRequest {
  endpoint: WebUiEndpoint;
  body: Record<string, unknown>;
}

/**
 * The WebUI request for a job: txt2img without images, else img2img with `init_images` (the
 * first is the base) and, with a mask, inpainting. Rejects only when the mask cannot be decoded.
 */
export async function webuiRequest(job: ImageJob): Promise<WebUiRequest> {
  const params = job.model.params;
  const body: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(params)) if (!INTERPRETED_PARAMS.has(k) && !COMPUTED_FIELDS.has(k)) body[k] = v;
  const base = job.images[0];
  const width = job.size?.width ?? numberParam(params.width) ?? base?.width ?? DEFAULT_SIDE;
  const height = job.size?.height ?? numberParam(params.height) ?? base?.height ?? DEFAULT_SIDE;
  Object.assign(body, {
    prompt: job.prompt,
    width,
    height,
    steps: stepsForQuality(job.quality, params),
    batch_size: 1,
    n_iter: 1,
    send_images: true,
    save_images: false,
  });
  const overrides: Record<string, unknown> = isPlainObject(params.override_settings) ? { ...params.override_settings } : {};
  if (typeof params.checkpoint === "string" && params.checkpoint.length > 0) overrides.sd_model_checkpoint = params.checkpoint;
  if (Object.keys(overrides).length > 0) {
    body.override_settings = overrides;
    body.override_settings_restore_afterwards ??= true;
  }
  if (job.images.length === 0) return { endpoint: "txt2img", body };

  body.init_images = job.images.map((img) => toBase64(img.bytes));
  body.denoising_strength ??= DEFAULT_DENOISING_STRENGTH;
  if (job.mask) {
    body.mask = toBase64(await webuiMaskFromOpenAI(job.mask));
    body.inpainting_mask_invert = 0; // white = repaint, as converted
    body.inpainting_fill ??= 1; // start from the original pixels
    body.inpaint_full_res ??= false;
    body.mask_blur ??= 4;
  }
  return { endpoint: "img2img", body };
}

/**
 * A fresh task id in the WebUI's own form, `task(…)` (its API makes `task(txt2img-XXXXXXX)`,
 * modules/progress.py create_task_id; its browser UI `task(<15 random characters>)`), ours
 * marked `atelier-` and random enough never to meet another client's.
 */
export function newWebUiTaskId(): string {
  return `task(${newId("atelier-", 22)})`;
}

/**
 * The payload (webuiRequest's body as JSON) with `force_task_id` set: the WebUI registers the
 * request under that id (AUTOMATIC1111 from 1.8.0, and Forge; older versions ignore the field).
 * Spliced in front instead of serialising again: the body can hold megabytes of base64 images,
 * and every attempt has its own id. The body never has the field itself (COMPUTED_FIELDS).
 */
export function payloadWithTaskId(json: string, taskId: string): string {
  const rest = json.slice(1).trimStart();
  return `{"force_task_id":${JSON.stringify(taskId)}${rest.startsWith("}") ? "" : ","}${rest}`;
}

function numberParam(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.round(v) : undefined;
}
