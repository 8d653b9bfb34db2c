/**
 * How the `sdwebui` kind is reached: the API paths under `base_url`, the headers, and which
 * answer statuses refuse the request itself.
 */
import type { UpstreamConfig } from "../../config";
import type { AccountAuth } from "../credentials";
import type { AttemptContext } from "../pool";
import type { SecretRedactor } from "../redact";
import { callJson, callUpstream, joinUrl, readJson } from "../upstreamHttp";
import { MAX_IMAGE_BYTES } from "../../core/limits";
import type { Clock } from "../../core/clock";

export const WEBUI_PATHS = { txt2img: "/sdapi/v1/txt2img", img2img: "/sdapi/v1/img2img" } as const;
export const PROGRESS_PATH = "/sdapi/v1/progress";

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
}
