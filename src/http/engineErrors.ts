/** Maps the engines' typed failures to our API errors (engines never choose HTTP statuses). */
import {
  EngineError,
  EngineOutputInvalid,
  EngineTimeout,
  UpstreamFailed,
  UpstreamRateLimited,
  UpstreamRejected,
  UpstreamUnavailable,
} from "../engines/types";
import { ApiError, badRequest, tooManyRequests } from "./errors";

export function apiErrorFromEngine(e: unknown): ApiError | null {
  if (!(e instanceof EngineError)) return null;
  if (e instanceof UpstreamRateLimited) {
    return tooManyRequests(`The upstream is rate limiting every account: ${e.message}`, "upstream_rate_limited", e.retryAfterMs);
  }
  if (e instanceof UpstreamRejected) return badRequest(`The upstream rejected the request: ${e.message}`, null, "upstream_rejected");
  if (e instanceof UpstreamUnavailable) return new ApiError(503, "upstream_error", `No upstream account is available: ${e.message}`, null, "upstream_unavailable");
  if (e instanceof UpstreamFailed) return new ApiError(502, "upstream_error", `The upstream failed: ${e.message}`, null, "upstream_error");
  if (e instanceof EngineTimeout) return new ApiError(504, "upstream_error", `The engine did not finish in time: ${e.message}`, null, "timeout");
  if (e instanceof EngineOutputInvalid) return new ApiError(502, "upstream_error", `The engine returned an unusable result: ${e.message}`, null, "invalid_engine_output");
  return new ApiError(502, "upstream_error", e.message, null, "engine_error");
}
