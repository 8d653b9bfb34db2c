/**
 * How the `sdwebui` kind is reached: the API paths under `base_url`, the headers, which answer
 * statuses refuse the request itself, and the two calls that stop an abandoned generation
 * (the WebUI's task state by id, and its interrupt).
 */
import type { UpstreamConfig } from "../../config";
import type { AccountAuth } from "../credentials";
import type { AttemptContext, PoolAccountConfig } from "../pool";
import type { SecretRedactor } from "../redact";
import { callJson, callUpstream, joinUrl, readJson } from "../upstreamHttp";
import { MAX_IMAGE_BYTES } from "../../core/limits";
import type { Clock } from "../../core/clock";

export const WEBUI_PATHS = { txt2img: "/sdapi/v1/txt2img", img2img: "/sdapi/v1/img2img" } as const;
export const PROGRESS_PATH = "/sdapi/v1/progress";
/**
 * One task's state by its id (AUTOMATIC1111 modules/progress.py `progressapi`): registered by
 * webui.py with the browser UI only, so a WebUI started with `--nowebui` answers 404.
 */
export const TASK_PROGRESS_PATH = "/internal/progress";
/** Stops whatever the WebUI runs now, whoever sent it (modules/api/api.py `interruptapi`). */
export const INTERRUPT_PATH = "/sdapi/v1/interrupt";

/** A progress answer: a few numbers and at most one preview image (base64). */
const MAX_PROGRESS_BYTES = Math.ceil((MAX_IMAGE_BYTES * 4) / 3) + 64 * 1024;
export type WebUiEndpoint = keyof typeof WEBUI_PATHS;

/** FastAPI answers 422 for a payload it refuses; that will not change on another account. */
export const REJECT_STATUSES = [400, 422];

export class WebUiTransport {
  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly auth: AccountAuth,
    private readonly redactor: SecretRedactor,
    private readonly clock: Clock,
  ) {}

  /** POSTs the JSON payload; the parsed JSON answer of a 2xx, else an AttemptFailure. */
  postJson(ctx: AttemptContext, endpoint: WebUiEndpoint, json: string): Promise<unknown> {
    return callJson({
      url: joinUrl(this.upstream.base_url, WEBUI_PATHS[endpoint]),
      headers: { ...this.auth.headersFor(ctx.account.id), "content-type": "application/json", accept: "application/json" },
      body: json,
      signal: ctx.signal,
      redactor: this.redactor,
      now: this.clock,
      rejectStatuses: REJECT_STATUSES,
    });
  }

  /**
   * GET /sdapi/v1/progress with this account's credentials: the WebUI's current job, with its
   * live preview (`current_image`) unless `withImage` is false (`skip_current_image`).
   */
  async progress(ctx: AttemptContext, withImage: boolean, signal: AbortSignal): Promise<unknown> {
    const call = {
      url: `${joinUrl(this.upstream.base_url, PROGRESS_PATH)}?skip_current_image=${withImage ? "false" : "true"}`,
      method: "GET" as const,
      headers: { ...this.auth.headersFor(ctx.account.id), accept: "application/json" },
      signal,
      redactor: this.redactor,
      now: this.clock,
    };
    return readJson(await callUpstream(call), call, MAX_PROGRESS_BYTES);
  }

  /**
   * POST /internal/progress for one task id, without its live preview: the WebUI's answer
   * (`{active, queued, completed, …}`, parse.ts taskStateFromWebUiAnswer). Any status but 2xx,
   * a 404 included, throws.
   */
  async taskState(account: PoolAccountConfig, taskId: string, signal: AbortSignal): Promise<unknown> {
    const call = {
      url: joinUrl(this.upstream.base_url, TASK_PROGRESS_PATH),
      headers: { ...this.auth.headersFor(account.id), "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify({ id_task: taskId, id_live_preview: -1, live_preview: false }),
      signal,
      redactor: this.redactor,
      now: this.clock,
    };
    // Bounded like a progress answer: a WebUI that ignores `live_preview` (before 1.6.0) may add one.
    return readJson(await callUpstream(call), call, MAX_PROGRESS_BYTES);
  }

  /** POST /sdapi/v1/interrupt: stops the job the WebUI runs now, whichever it is (the caller checked it is ours). */
  async interrupt(account: PoolAccountConfig, signal: AbortSignal): Promise<void> {
    const res = await callUpstream({
      url: joinUrl(this.upstream.base_url, INTERRUPT_PATH),
      headers: { ...this.auth.headersFor(account.id), accept: "application/json" },
      signal,
      redactor: this.redactor,
      now: this.clock,
    });
    await res.body?.cancel();
  }
}
