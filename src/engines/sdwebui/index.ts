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
 *   denoising_strength, seed, …); `checkpoint` becomes override_settings.sd_model_checkpoint;
 * - while a generation runs for a job that listens to progress, GET /sdapi/v1/progress is
 *   polled (every PROGRESS_POLL_MS, one poll at a time, same account): its `progress` is
 *   reported as the fraction and its `current_image` (the WebUI's live preview) as up to
 *   partialImages partials, spread over the run (engines/progress PartialSchedule). The WebUI
 *   reports its current job, whoever sent it: on a WebUI shared with other clients, progress
 *   seen before ours starts belongs to theirs. Polling failures are ignored;
 * - every attempt names its generation with a task id of its own (`force_task_id`), under
 *   which the WebUI (1.8.0 and later) can be asked about that generation alone.
 */
import type { UpstreamConfig } from "../../config";
import { UpstreamRejected, type GeneratedImage, type ImageEngine, type ImageJob } from "../../core/engine";
import { AccountAuth } from "../credentials";
import type { AccountPool, AttemptContext } from "../pool";
import { SecretRedactor } from "../redact";
import { imageFromWebUiAnswer, progressFromWebUiAnswer } from "./parse";
import { newWebUiTaskId, payloadWithTaskId, webuiRequest, type WebUiRequest } from "./translate";
import { WebUiTransport } from "./transport";
import type { Clock } from "../../core/clock";
import { PartialSchedule, partialsWanted, reportProgress } from "../progress";
import { upstreamPartial } from "../upstreamHttp";
import { pauseUnlessAborted } from "../../core/deadline";

/** How often a running generation's progress is asked for. */
export const PROGRESS_POLL_MS = 500;

export class SdWebUiEngine implements ImageEngine {
  private readonly transport: WebUiTransport;

  constructor(
    upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
    private readonly progressPollMs = PROGRESS_POLL_MS,
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
    const schedule = new PartialSchedule(partialsWanted(job));
    const { value, trace } = await this.pool.run(async (ctx) => {
      const taskId = newWebUiTaskId();
      const stopWatching = job.onProgress ? this.watchProgress(ctx, job, schedule) : undefined;
      try {
        return imageFromWebUiAnswer(await this.transport.postJson(ctx, request.endpoint, payloadWithTaskId(json, taskId)), job.prompt);
      } finally {
        stopWatching?.();
      }
    }, job.signal);
    return { ...value, trace };
  }

  /** Polls progress until the returned function is called (or the attempt ends); never throws. */
  private watchProgress(ctx: AttemptContext, job: ImageJob, schedule: PartialSchedule): () => void {
    const stop = new AbortController();
    const signal = AbortSignal.any([ctx.signal, stop.signal]);
    const poll = async () => {
      while (!signal.aborted) {
        await pauseUnlessAborted(this.progressPollMs, signal);
        if (signal.aborted) return;
        let progress;
        try {
          progress = progressFromWebUiAnswer(await this.transport.progress(ctx, schedule.wantsMore, signal));
        } catch {
          continue;
        }
        if (!progress || signal.aborted) continue;
        const partial = progress.currentImage && schedule.isDue(progress.fraction) ? upstreamPartial(progress.currentImage) : null;
        if (partial) schedule.taken();
        reportProgress(job, partial ? { fraction: progress.fraction, partial } : { fraction: progress.fraction });
      }
    };
    void poll();
    return () => stop.abort();
  }
}

