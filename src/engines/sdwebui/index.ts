/**
 * The `sdwebui` upstream kind: AUTOMATIC1111, Forge and SD.Next started with `--api`. Each
 * attempt sends the payload of translate.ts through transport.ts and reads it with parse.ts:
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
import { UpstreamRejected, type GeneratedImage, type ImageEngine, type ImageJob } from "../../core/engine";
import { AccountAuth } from "../credentials";
import type { AccountPool } from "../pool";
import { SecretRedactor } from "../redact";
import { imageFromWebUiAnswer } from "./parse";
import { webuiRequest, type WebUiRequest } from "./translate";
import { WebUiTransport } from "./transport";
import type { Clock } from "../../core/clock";

export class SdWebUiEngine implements ImageEngine {
  private readonly transport: WebUiTransport;

  constructor(
    upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
  ) {
    this.transport = new WebUiTransport(upstream, new AccountAuth(upstream.accounts), redactor, clock);
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job);
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job);
  }

  private async run(job: ImageJob): Promise<GeneratedImage> {
    let request: WebUiRequest;
    try {
      request = await webuiRequest(job);
    } catch (e) {
      // Only the mask is decoded here; the images flow checked it, so this is a refusal, not a failure.
      throw new UpstreamRejected(`the mask could not be converted for the WebUI: ${e instanceof Error ? e.message : String(e)}`);
    }
    const json = JSON.stringify(request.body);
    const { value, trace } = await this.pool.run(
      async (ctx) => imageFromWebUiAnswer(await this.transport.postJson(ctx, request.endpoint, json), job.prompt),
      job.signal,
    );
    return { ...value, trace };
  }
}
