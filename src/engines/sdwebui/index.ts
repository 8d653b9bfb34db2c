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
 * - every attempt names its generation with a task id of its own (`force_task_id`). When the
 *   attempt is abandoned while the WebUI works on it (its signal fires: the request's deadline,
 *   the attempt's timeout, an async task's cancel; a synchronous client that hangs up after the
 *   charge does not abort it), the WebUI is asked about that id and interrupted only if the id
 *   is the one running, never another client's job; a queued one is left to run
 *   (abandoned.ts says why). The attempt ends only after that (bounded by
 *   STOP_ABANDONED_TIMEOUT_MS): the account's slot in the pool, the request's gate permit or
 *   the async task's slot, and a graceful stop's drain all wait until the WebUI was told to
 *   stop, so a retry or the next job is not sent to a WebUI still busy with the abandoned one.
 */
import type { UpstreamConfig } from "../../config";
import { UpstreamRejected, type GeneratedImage, type ImageEngine, type ImageJob } from "../../core/engine";
import { AccountAuth } from "../credentials";
import type { AccountPool, AttemptContext, PoolAccountConfig, PoolLogger } from "../pool";
import { MAX_UPSTREAM_MESSAGE_CHARS, SecretRedactor } from "../redact";
import { imageFromWebUiAnswer, progressFromWebUiAnswer } from "./parse";
import { newWebUiTaskId, payloadWithTaskId, webuiRequest, type WebUiRequest } from "./translate";
import { stopAbandonedTask, type AbandonedTask } from "./abandoned";
import { WebUiTransport } from "./transport";
import type { Clock } from "../../core/clock";
import { PartialSchedule, partialsWanted, reportProgress } from "../progress";
import { upstreamPartial } from "../upstreamHttp";
import { pauseUnlessAborted } from "../../core/deadline";

/** How often a running generation's progress is asked for. */
export const PROGRESS_POLL_MS = 500;

/** The log line for what became of an abandoned generation. */
const ABANDONED_SAID: Record<AbandonedTask["outcome"], string> = {
  interrupted: "abandoned WebUI generation interrupted",
  queued: "abandoned WebUI generation left queued: the WebUI will run it when its turn comes",
  completed: "abandoned WebUI generation had already finished",
  unknown: "abandoned WebUI generation unknown to the WebUI (older than 1.8.0, or not queued yet): not interrupted",
  unchecked: "abandoned WebUI generation not interrupted: its state could not be read",
  "interrupt-failed": "abandoned WebUI generation: the interrupt failed",
};

export class SdWebUiEngine implements ImageEngine {
  private readonly transport: WebUiTransport;

  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    private readonly redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
    private readonly progressPollMs = PROGRESS_POLL_MS,
    /** Where what became of an abandoned generation is told. */
    private readonly logger?: PoolLogger,
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
      } catch (e) {
        // Our side gave up: the WebUI goes on with it unless told (awaited: see the header).
        if (ctx.signal.aborted) await this.stopAbandoned(ctx.account, taskId);
        throw e;
      } finally {
        stopWatching?.();
      }
    }, job.signal);
    return { ...value, trace };
  }

  /** Interrupts the abandoned task if it is the one the WebUI runs (abandoned.ts), and says what became of it. Never throws. */
  private async stopAbandoned(account: PoolAccountConfig, taskId: string): Promise<void> {
    const stopped = await stopAbandonedTask(this.transport, account, taskId);
    const fields: Record<string, unknown> = { upstream: this.upstream.id, account: account.id, task_id: taskId, outcome: stopped.outcome };
    if ("reason" in stopped) fields.reason = this.redactor.message(stopped.reason, MAX_UPSTREAM_MESSAGE_CHARS);
    this.logger?.info(ABANDONED_SAID[stopped.outcome], fields);
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

