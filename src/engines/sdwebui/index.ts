/**
 * The `sdwebui` upstream kind: AUTOMATIC1111, Forge and SD.Next started with `--api`.
 *
 * - text only → POST {base_url}/sdapi/v1/txt2img;
 * - reference images or an edit → POST /sdapi/v1/img2img with `init_images` (first = base);
 * - an edit with a mask → inpainting, the OpenAI mask (transparent = edit) converted to the
 *   WebUI one (white = repaint);
 * - `size` → width/height ("auto": params.width/height, else the base image's size, else 1024);
 * - `quality` → steps (QUALITY_STEPS; "auto" uses params.steps when set);
 * - model params from config pass through (sampler_name, scheduler, cfg_scale, negative_prompt,
 *   denoising_strength, seed, …); `checkpoint` becomes override_settings.sd_model_checkpoint.
 */
import type { UpstreamConfig } from "../../config";
import { AccountAuth } from "../credentials";
import type { AccountPool, Clock } from "../pool";
import { AttemptFailure } from "../pool";
import { SecretRedactor } from "../redact";
import { UpstreamRejected, type GeneratedImage, type ImageEngine, type ImageJob } from "../../core/engine";
import { callJson, checkUpstreamImage, decodeBase64Image, joinUrl, toBase64 } from "../upstreamHttp";
import { webuiMaskFromOpenAI } from "./mask";

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

/** Keys of [[models]].params that this engine interprets instead of passing through. */
const INTERPRETED_PARAMS = new Set(["checkpoint", "steps", "width", "height", "override_settings"]);
/** Fields this engine computes; params cannot override them. */
const COMPUTED_FIELDS = new Set(["prompt", "init_images", "mask", "batch_size", "n_iter", "send_images", "save_images"]);

export function stepsForQuality(quality: string, params: Record<string, unknown>): number {
  if ((quality === "auto" || quality === "") && typeof params.steps === "number" && params.steps > 0) return Math.round(params.steps);
  return QUALITY_STEPS[quality] ?? QUALITY_STEPS.auto!;
}

export class SdWebUiEngine implements ImageEngine {
  private readonly auth: AccountAuth;

  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    private readonly clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    private readonly redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
  ) {
    this.auth = new AccountAuth(upstream.accounts);
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job);
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job);
  }

  /** The JSON body for the WebUI; exported shape for the tests to reason about. */
  async payload(job: ImageJob): Promise<{ path: string; body: Record<string, unknown> }> {
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
    const overrides: Record<string, unknown> = isRecord(params.override_settings) ? { ...params.override_settings } : {};
    if (typeof params.checkpoint === "string" && params.checkpoint.length > 0) overrides.sd_model_checkpoint = params.checkpoint;
    if (Object.keys(overrides).length > 0) {
      body.override_settings = overrides;
      body.override_settings_restore_afterwards ??= true;
    }
    if (job.images.length === 0) return { path: "/sdapi/v1/txt2img", body };

    body.init_images = job.images.map((img) => toBase64(img.bytes));
    body.denoising_strength ??= DEFAULT_DENOISING_STRENGTH;
    if (job.mask) {
      body.mask = toBase64(await webuiMaskFromOpenAI(job.mask));
      body.inpainting_mask_invert = 0; // white = repaint, as converted
      body.inpainting_fill ??= 1; // start from the original pixels
      body.inpaint_full_res ??= false;
      body.mask_blur ??= 4;
    }
    return { path: "/sdapi/v1/img2img", body };
  }

  private async run(job: ImageJob): Promise<GeneratedImage> {
    let built: { path: string; body: Record<string, unknown> };
    try {
      built = await this.payload(job);
    } catch (e) {
      // Only the mask is decoded here; the images flow checked it, so this is a refusal, not a failure.
      throw new UpstreamRejected(`the mask could not be converted for the WebUI: ${e instanceof Error ? e.message : String(e)}`);
    }
    const { path, body } = built;
    const json = JSON.stringify(body);
    const { value, trace } = await this.pool.run(async (ctx) => {
      const answer = await callJson({
        url: joinUrl(this.upstream.base_url, path),
        headers: { ...this.auth.headersFor(ctx.account.id), "content-type": "application/json", accept: "application/json" },
        body: json,
        signal: ctx.signal,
        redactor: this.redactor,
        now: this.clock,
        // FastAPI answers 422 for a payload it refuses; that will not change on another account.
        rejectStatuses: [400, 422],
      });
      const images = isRecord(answer) && Array.isArray(answer.images) ? answer.images : null;
      const first = images?.[0];
      if (typeof first !== "string") throw new AttemptFailure("failed", "WebUI answer has no images[0]");
      return checkUpstreamImage(decodeBase64Image(first), job.prompt);
    }, job.signal);
    return { ...value, trace };
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function numberParam(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.round(v) : undefined;
}
