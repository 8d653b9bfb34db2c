/**
 * How long Gemini asks us to wait after a 429. It sends no Retry-After header: the delay is in
 * the error body, as a google.rpc.RetryInfo detail (google/rpc/error_details.proto):
 *
 *   {"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[…QuotaFailure…,
 *     {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}
 *
 * `retryDelay` is a google.protobuf.Duration, whose JSON mapping (google/protobuf/duration.proto)
 * is a string: seconds, optionally up to nine fractional digits, then "s" ("37s", "1.5s",
 * "51820.638305887s"). Read strictly: any other shape (a sign, an exponent, another unit, the
 * {seconds, nanos} object form) is ignored, and the caller falls back to the headers, then to
 * the pool's own backoff.
 */
import { isPlainObject } from "../../core/values";

const RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo";

/**
 * A non-negative Duration in its JSON form. At most 12 digits of seconds: a Duration holds no
 * more than 315,576,000,000 s (10,000 years), so anything longer is not one.
 */
const DURATION = /^(\d{1,12})(?:\.(\d{1,9}))?s$/;

/**
 * The delay the first RetryInfo of a Gemini error body names, in ms (rounded up, so we never
 * come back early), at most `capMs`; undefined when the body names none we can read.
 *
 * The cap is the upstream's rate_limit_cooldown_max_ms: Gemini names long delays for daily
 * quotas (hours; gemini-cli's googleErrors.ts quotes "51820.638305887s"), and an account
 * resting that long on one answer would be lost to the pool; past the cap it is simply asked
 * again, and a further 429 rests it again.
 */
export function retryInfoDelayMs(body: string, capMs: number): number | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return undefined;
  }
  const error = isPlainObject(parsed) ? parsed.error : undefined;
  const details = isPlainObject(error) && Array.isArray(error.details) ? error.details : [];
  const info = details.find((d): d is Record<string, unknown> => isPlainObject(d) && d["@type"] === RETRY_INFO);
  const delay = info?.retryDelay;
  const m = typeof delay === "string" ? DURATION.exec(delay) : null;
  if (!m) return undefined;
  // Whole ms from the digits themselves (no float rounding of "0.001s"), and up for any rest.
  const frac = (m[2] ?? "").padEnd(9, "0");
  const ms = Number(m[1]) * 1000 + Number(frac.slice(0, 3)) + (/[1-9]/.test(frac.slice(3)) ? 1 : 0);
  return Math.min(ms, capMs);
}
