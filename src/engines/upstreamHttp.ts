/**
 * What every upstream adapter shares: calling the upstream over HTTP and turning each way it
 * can go wrong into an AttemptFailure the pool understands, redacting secrets from anything
 * an upstream says, reading retry hints, downloading `url` answers with bounds, and checking
 * that bytes an upstream calls an image really are one.
 */
import { concatChunks } from "../core/bytes";
import type { GeneratedImage } from "../core/engine";
import { sniffImageMime } from "../core/imageInput";
import { readDimensions } from "../core/image/dimensions";
import { AttemptFailure } from "./pool";
import { MAX_UPSTREAM_MESSAGE_CHARS, type SecretRedactor } from "./redact";

/** retry-after-ms (ms), else retry-after (seconds or an HTTP date); undefined when absent. */
export function retryAfterMs(headers: Headers, now: number): number | undefined {
  const ms = headers.get("retry-after-ms");
  if (ms !== null && ms.trim() !== "" && Number.isFinite(Number(ms)) && Number(ms) >= 0) return Math.ceil(Number(ms));
  const ra = headers.get("retry-after");
  if (ra === null || ra.trim() === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(ra.trim())) return Math.ceil(Number(ra) * 1000);
  const date = Date.parse(ra);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/**
 * The human part of an upstream error body (OpenAI's error.message, WebUI's detail/error, or
 * the text), redacted whole and only then cut to MAX_UPSTREAM_MESSAGE_CHARS.
 */
export function upstreamMessage(body: string, redactor: SecretRedactor): string {
  return redactor.message(messageOf(body, redactor), MAX_UPSTREAM_MESSAGE_CHARS) || "(empty body)";
}

function messageOf(body: string, redactor: SecretRedactor): string {
  try {
    const parsed = JSON.parse(body) as unknown;
    if (parsed && typeof parsed === "object") {
      const o = parsed as Record<string, unknown>;
      const err = o.error;
      if (err && typeof err === "object" && typeof (err as Record<string, unknown>).message === "string") return (err as { message: string }).message;
      if (typeof err === "string" && typeof o.message === "string") return `${err}: ${o.message}`;
      if (typeof o.detail === "string") return o.detail;
      // FastAPI's validation errors: each string is redacted before JSON escaping can hide a secret.
      if (Array.isArray(o.detail)) return JSON.stringify(redactStrings(o.detail, redactor));
      if (typeof o.message === "string") return o.message;
      if (typeof err === "string") return err;
    }
  } catch {
    // not JSON: use the text itself
  }
  return body.trim();
}

function redactStrings(value: unknown, redactor: SecretRedactor, depth = 0): unknown {
  if (typeof value === "string") return redactor.message(value);
  if (depth > 20 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => redactStrings(v, redactor, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [redactor.message(k), redactStrings(v, redactor, depth + 1)]));
}

export interface UpstreamCall {
  url: string;
  method?: "GET" | "POST";
  headers?: Record<string, string>;
  body?: BodyInit;
  signal: AbortSignal;
  /** Removes the configured secrets from anything the upstream says. */
  redactor: SecretRedactor;
  now: () => number;
  /** Statuses meaning "this request is refused" (no retry); others ≥ 400 are account/upstream failures. */
  rejectStatuses?: number[];
}

const MAX_ERROR_BODY = 64 * 1024;
const MAX_JSON_BODY = 256 * 1024 * 1024;

/**
 * Sends the request and returns the parsed JSON answer of a 2xx. Everything else becomes an
 * AttemptFailure: 429 rate_limited (with retry hint), 401/403 auth, reject statuses rejected,
 * other statuses, resets and unparsable bodies failed. An abort is rethrown untouched so the
 * pool can tell a timeout from a failure.
 */
export async function callJson(call: UpstreamCall): Promise<unknown> {
  const res = await send(call);
  const text = await readText(res, MAX_JSON_BODY, call);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new AttemptFailure("failed", `upstream answered ${res.status} with a body that is not JSON`, undefined, res.status);
  }
}

async function send(call: UpstreamCall): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(call.url, { method: call.method ?? "POST", headers: call.headers, body: call.body, signal: call.signal, redirect: "follow" });
  } catch (e) {
    if (call.signal.aborted) throw e;
    throw new AttemptFailure("failed", `could not reach the upstream: ${call.redactor.message(errorText(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
  }
  if (res.ok) return res;
  const body = upstreamMessage(await readText(res, MAX_ERROR_BODY, call).catch(() => ""), call.redactor);
  if (res.status === 429) throw new AttemptFailure("rate_limited", `rate limited (429): ${body}`, retryAfterMs(res.headers, call.now()), 429);
  if (res.status === 401 || res.status === 403) throw new AttemptFailure("auth", `credentials refused (${res.status}): ${body}`, undefined, res.status);
  if ((call.rejectStatuses ?? [400]).includes(res.status)) throw new AttemptFailure("rejected", body, undefined, res.status);
  throw new AttemptFailure("failed", `upstream answered ${res.status}: ${body}`, undefined, res.status);
}

/** Reads a body up to `limit` bytes; a reset mid-body is a failure, an abort is rethrown. */
async function readText(res: Response, limit: number, call: UpstreamCall): Promise<string> {
  const bytes = await readBounded(res, limit, call);
  return new TextDecoder().decode(bytes);
}

async function readBounded(res: Response, limit: number, call: { signal: AbortSignal; redactor: SecretRedactor }): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length"));
  if (Number.isFinite(declared) && declared > limit) {
    await res.body?.cancel().catch(() => {});
    throw new AttemptFailure("failed", `upstream answer of ${declared} bytes exceeds the limit of ${limit}`);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    if (!res.body) return new Uint8Array();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      total += chunk.byteLength;
      if (total > limit) {
        await res.body.cancel().catch(() => {});
        throw new AttemptFailure("failed", `upstream answer exceeds the limit of ${limit} bytes`);
      }
      chunks.push(chunk);
    }
  } catch (e) {
    if (e instanceof AttemptFailure || call.signal.aborted) throw e;
    throw new AttemptFailure("failed", `the upstream connection broke while reading its answer: ${call.redactor.message(errorText(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
  }
  return concatChunks(chunks, total);
}

/** Downloads an image an upstream answered with as a URL, bounded in size and time. */
export async function downloadImage(
  url: string,
  opts: { maxBytes: number; timeoutMs: number; signal: AbortSignal; redactor: SecretRedactor },
): Promise<Uint8Array> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new AttemptFailure("failed", "upstream answered with an image url that is not a URL");
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new AttemptFailure("failed", "upstream answered with a non-HTTP image url");
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = AbortSignal.any([opts.signal, timeout]);
  let res: Response;
  try {
    // No credentials: the URL is pre-signed (OpenAI's are), and our key must not travel elsewhere.
    res = await fetch(parsed, { signal, redirect: "follow" });
  } catch (e) {
    if (opts.signal.aborted) throw e;
    throw new AttemptFailure(timeout.aborted ? "timeout" : "failed", `downloading the upstream image failed: ${opts.redactor.message(errorText(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
  }
  if (!res.ok) {
    await res.body?.cancel().catch(() => {});
    throw new AttemptFailure("failed", `downloading the upstream image answered ${res.status}`);
  }
  try {
    return await readBounded(res, opts.maxBytes, { signal, redactor: opts.redactor });
  } catch (e) {
    if (timeout.aborted && !opts.signal.aborted) throw new AttemptFailure("timeout", `downloading the upstream image took longer than ${opts.timeoutMs} ms`);
    throw e;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * Bytes an upstream returned as its image: a PNG, JPEG or WebP by magic bytes with a readable
 * header (core's sniff and header reader, the same as for client images), else a failed
 * attempt, so the pool retries on another account while there is time. The images flow then
 * verifies the result fully (core/imageRequests verifyOutput: a complete decode), as it does
 * for every engine; this cheap check only decides whether the attempt counts as a success.
 */
export function checkUpstreamImage(bytes: Uint8Array, revisedPrompt?: string): GeneratedImage {
  const mime = sniffImageMime(bytes);
  if (!mime) throw new AttemptFailure("failed", "upstream returned bytes that are not a PNG, JPEG or WebP image");
  const dims = readDimensions(bytes, mime);
  if (!dims || dims.width < 1 || dims.height < 1) throw new AttemptFailure("failed", `upstream returned a ${mime} whose header is unreadable`);
  return { bytes, mime, width: dims.width, height: dims.height, ...(revisedPrompt !== undefined ? { revisedPrompt } : {}) };
}

/** Strict base64 (optionally a data URL) to bytes; malformed text is a failed attempt. */
export function decodeBase64Image(value: string): Uint8Array {
  const b64 = value.startsWith("data:") ? value.slice(value.indexOf(",") + 1) : value;
  const clean = b64.replace(/\s+/g, "");
  if (clean.length === 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(clean)) throw new AttemptFailure("failed", "upstream returned an image that is not valid base64");
  return new Uint8Array(Buffer.from(clean, "base64"));
}

export function toBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

export function joinUrl(base: string, path: string): string {
  return base.replace(/\/+$/, "") + path;
}

