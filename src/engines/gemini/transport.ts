/**
 * How the `gemini` kind is reached (the Gemini API, ai.google.dev/api/generate-content):
 * `POST {base_url}/v1beta/models/{model}:generateContent`, JSON, the account's api_key in
 * `x-goog-api-key`.
 */
import type { UpstreamConfig } from "../../config";
import type { AttemptContext } from "../pool";
import { AttemptFailure } from "../pool";
import type { AccountAuth } from "../credentials";
import type { SecretRedactor } from "../redact";
import { callJson, joinUrl } from "../upstreamHttp";
import { retryInfoDelayMs } from "./retryInfo";
import type { Clock } from "../../core/clock";

/** The path of generateContent for a model id (`gemini-2.5-flash-image` or `models/gemini-…`). */
export function generateContentPath(upstreamModel: string): string {
  const id = upstreamModel.replace(/^models\//, "");
  return `/v1beta/models/${encodeURIComponent(id)}:generateContent`;
}

/**
 * Statuses that refuse the request itself (INVALID_ARGUMENT, FAILED_PRECONDITION, a body too
 * large): another account would refuse it too, so no retry. 429 (RESOURCE_EXHAUSTED) cools the
 * account down for the delay its RetryInfo names (retryInfo.ts), 401/403 (PERMISSION_DENIED)
 * disable it, 5xx are failed attempts.
 */
export const REJECT_STATUSES = [400, 413];

/**
 * Gemini answers an unknown or revoked key with 400 INVALID_ARGUMENT ("API key not valid",
 * reason API_KEY_INVALID), not 401: that is the account's fault, so it disables the account
 * like a 401 instead of refusing the client's request.
 */
const INVALID_KEY = /API key not valid|API_KEY_INVALID|API key expired/i;

export class GeminiTransport {
  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly auth: AccountAuth,
    private readonly redactor: SecretRedactor,
    private readonly clock: Clock,
  ) {}

  private readonly retryAfterInBody = (body: string): number | undefined => retryInfoDelayMs(body, this.upstream.rate_limit_cooldown_max_ms);

  /** POSTs the JSON body to generateContent; the parsed answer of a 2xx, else an AttemptFailure. */
  async generateContent(ctx: AttemptContext, upstreamModel: string, json: string): Promise<unknown> {
    try {
      return await callJson({
        url: joinUrl(this.upstream.base_url, generateContentPath(upstreamModel)),
        headers: { ...this.auth.headersFor(ctx.account.id), "content-type": "application/json", accept: "application/json" },
        body: json,
        signal: ctx.signal,
        redactor: this.redactor,
        now: this.clock,
        rejectStatuses: REJECT_STATUSES,
        // Gemini names a 429's delay in the body (RetryInfo), never in a Retry-After header.
        retryAfterInBody: this.retryAfterInBody,
      });
    } catch (e) {
      if (e instanceof AttemptFailure && e.kind === "rejected" && INVALID_KEY.test(e.message)) {
        throw new AttemptFailure("auth", `credentials refused (${e.status ?? 400}): ${e.message}`, undefined, e.status);
      }
      throw e;
    }
  }
}
