/**
 * How the `sdwebui` kind is reached: the API paths under `base_url`, the headers, and which
 * answer statuses refuse the request itself.
 */
import type { UpstreamConfig } from "../../config";
import type { AccountAuth } from "../credentials";
import type { AttemptContext } from "../pool";
import type { SecretRedactor } from "../redact";
import { callJson, joinUrl } from "../upstreamHttp";
import type { Clock } from "../../core/clock";

export const WEBUI_PATHS = { txt2img: "/sdapi/v1/txt2img", img2img: "/sdapi/v1/img2img" } as const;
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
}
