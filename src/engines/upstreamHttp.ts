/**
 * What every upstream adapter shares: calling the upstream over HTTP and turning each way it
 * can go wrong into an AttemptFailure the pool understands, redacting secrets from anything
 * an upstream says, reading retry hints, downloading `url` answers with bounds, and checking
 * that bytes an upstream calls an image really are one.
 */
import { concatChunks } from "../core/bytes";
import type { GeneratedImage, ProgressReport } from "../core/engine";
import { MAX_IMAGE_BYTES } from "../core/limits";
import { DATA_URL, sniffImageMime } from "../core/imageInput";
import { readDimensions } from "../core/image/dimensions";
import { AttemptFailure } from "./pool";
import { cancelViewOf, Http1Error, http1Request, http1Target, type AnswerHead, type Http1Answer, type Http1Target } from "./http1";
import type { CancelView } from "../core/cancelScope";
import { MAX_UPSTREAM_MESSAGE_CHARS, type SecretRedactor } from "./redact";
import type { UpstreamConfig } from "../config";

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
  headers?: Readonly<Record<string, string>>;
  body?: BodyInit;
  signal: AbortSignal;
  /** The same cancellation as `signal`, for a client that need not make the AbortSignal (engines/http1). */
  cancel?: CancelView;
  /** Removes the configured secrets from anything the upstream says. */
  redactor: SecretRedactor;
  now: () => number;
  /** Statuses meaning "this request is refused" (no retry); others ≥ 400 are account/upstream failures. */
  rejectStatuses?: number[];
  /**
   * The delay a 429's body names, in ms, or undefined: for an upstream that says it there
   * instead of in a header (Gemini's RetryInfo). Asked first; the headers are the fallback.
   */
  retryAfterInBody?: (body: string) => number | undefined;
}

const MAX_ERROR_BODY = 64 * 1024;
const MAX_JSON_BODY = 256 * 1024 * 1024;

/**
 * Sends the request and returns the parsed JSON answer of a 2xx. Everything else becomes an
 * AttemptFailure: 429 rate_limited (with retry hint), 401/403 auth, reject statuses rejected,
 * other statuses, resets and unparsable bodies failed. An abort is rethrown untouched so the
 * pool can tell a timeout from a failure. One async frame waits for the upstream (not one per
 * helper): everything a request holds while it waits outlives a young-generation collection.
 * A plain-http upstream is called through engines/http1's keep-alive client, any other through fetch.
 */
export function callJson<T = unknown>(call: UpstreamCall, read?: JsonReader<T>): Promise<T> {
  const target = http1Target(call.url, call.body);
  const reader = read ?? (asIs as JsonReader<T>);
  return target ? callJsonHttp1(target, call, reader) : callJsonViaFetch(call, reader);
}

/**
 * Turns a parsed answer into the caller's value in callJson's own frame (a throw is the
 * attempt's failure): no async frame of the caller's own waits for the upstream.
 */
export type JsonReader<T> = (json: unknown) => T;

const asIs: JsonReader<unknown> = (json) => json;

async function callJsonViaFetch<T>(call: UpstreamCall, read: JsonReader<T>): Promise<T> {
  return read(await readJson(await callUpstream(call), call));
}

const utf8 = new TextDecoder();

/**
 * callJson over the keep-alive HTTP/1.1 client (engines/http1: plain-http upstreams), with the
 * same outcomes as through fetch; a redirect is sent again through fetch, which follows it.
 */
async function callJsonHttp1<T>(target: Http1Target, call: UpstreamCall, read: JsonReader<T>): Promise<T> {
  const cancel = call.cancel ?? cancelViewOf(call.signal);
  let answer: Http1Answer;
  try {
    answer = await http1Request(target, {
      method: call.method ?? "POST",
      headers: call.headers,
      body: call.body as string | undefined,
      cancel,
      limitFor: (status) => (status >= 200 && status < 300 ? MAX_JSON_BODY : MAX_ERROR_BODY),
    });
  } catch (e) {
    if (cancel.aborted) throw e;
    if (!(e instanceof Http1Error) || e.stage === "request") throw unreachable(e, call);
    const head = e.head;
    // A redirect with a body too large to read is still a redirect (fetch follows it).
    if (head && isRedirect(head)) return callJsonViaFetch(call, read);
    // An error answer too large to read is refused with what it said: nothing (as readText's limit does through fetch).
    if (head && (head.status < 200 || head.status >= 300)) throw refusalOf(head.status, head.headers, "", call);
    if (e.tooLarge !== undefined) throw new AttemptFailure("failed", `upstream answer exceeds the limit of ${e.tooLarge} bytes`);
    return brokenRead(e, call);
  }
  const { head, body } = answer;
  const status = head.status;
  if (isRedirect(head)) return callJsonViaFetch(call, read);
  if (status < 200 || status >= 300) throw refusalOf(status, head.headers, utf8.decode(body), call);
  if (body.byteLength === 0) throw notJson(status);
  let json: unknown;
  try {
    json = JSON.parse(utf8.decode(body));
  } catch {
    throw notJson(status);
  }
  return read(json);
}

function notJson(status: number): AttemptFailure {
  return new AttemptFailure("failed", `upstream answered ${status} with a body that is not JSON`, undefined, status);
}

function isRedirect(head: AnswerHead): boolean {
  return head.status >= 300 && head.status < 400 && head.headers.has("location");
}

/** The parsed JSON body of an upstream answer (bounded like callJson's). */
export async function readJson(res: Response, call: Pick<UpstreamCall, "signal" | "redactor">, limit = MAX_JSON_BODY): Promise<unknown> {
  const declared = declaredLength(res, limit);
  // Bun's json() answers null for an empty body, which JSON.parse refuses: not JSON either way.
  if (declared === 0) throw notJson(res.status);
  if (declared !== null) {
    // Read and parsed in one native call (no intermediate string handed to JSON.parse).
    try {
      return (await res.json()) as unknown;
    } catch (e) {
      if (!call.signal.aborted && e instanceof SyntaxError) throw notJson(res.status);
      return brokenRead(e, call);
    }
  }
  const text = await readText(res, limit, call);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw notJson(res.status);
  }
}

/**
 * Sends the request and returns the 2xx answer unread (for answers that are not one JSON
 * document, such as server-sent events); every other outcome fails as in callJson.
 */
export async function callUpstream(call: UpstreamCall): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(call.url, requestInit(call));
  } catch (e) {
    throw unreachable(e, call);
  }
  if (!res.ok) throw await refusal(res, call);
  return res;
}

/** fetch's options for the call (redirects are followed, fetch's default). */
function requestInit(call: UpstreamCall): RequestInit {
  return { method: call.method ?? "POST", headers: call.headers, body: call.body, signal: call.signal };
}

/** What a fetch that threw becomes: an abort untouched (the pool tells a timeout from a failure), else a failed attempt. */
function unreachable(e: unknown, call: UpstreamCall): unknown {
  if (call.signal.aborted) return e;
  return new AttemptFailure("failed", `could not reach the upstream: ${call.redactor.message(errorText(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
}

/** The AttemptFailure of an answer that is not a 2xx, with the upstream's own words (redacted, bounded). */
async function refusal(res: Response, call: UpstreamCall): Promise<AttemptFailure> {
  return refusalOf(res.status, res.headers, await readText(res, MAX_ERROR_BODY, call).catch(() => ""), call);
}

function refusalOf(status: number, headers: Headers, text: string, call: UpstreamCall): AttemptFailure {
  const body = upstreamMessage(text, call.redactor);
  if (status === 429) return new AttemptFailure("rate_limited", `rate limited (429): ${body}`, call.retryAfterInBody?.(text) ?? retryAfterMs(headers, call.now()), 429);
  if (status === 401 || status === 403) return new AttemptFailure("auth", `credentials refused (${status}): ${body}`, undefined, status);
  if ((call.rejectStatuses ?? [400]).includes(status)) return new AttemptFailure("rejected", body, undefined, status);
  return new AttemptFailure("failed", `upstream answered ${status}: ${body}`, undefined, status);
}

/** Reads a body up to `limit` bytes; a reset mid-body is a failure, an abort is rethrown. */
async function readText(res: Response, limit: number, call: Pick<UpstreamCall, "signal" | "redactor">): Promise<string> {
  if (declaredWithin(res, limit)) return readWhole(res, call, () => res.text());
  const bytes = await readBounded(res, limit, call);
  return new TextDecoder().decode(bytes);
}

/**
 * The body's size is known and within `limit`: its Content-Length frames what fetch reads, and
 * no Content-Encoding means fetch will not inflate it into more. Only then is it read in one
 * call (no chunk iteration and concatenation); otherwise it is counted as it streams in.
 */
function declaredWithin(res: Response, limit: number): boolean {
  return declaredLength(res, limit) !== null;
}

/** The body's declared length when declaredWithin holds, else null. */
function declaredLength(res: Response, limit: number): number | null {
  const length = res.headers.get("content-length");
  if (length === null || res.headers.get("content-encoding") !== null) return null;
  const declared = Number(length);
  return Number.isSafeInteger(declared) && declared >= 0 && declared <= limit ? declared : null;
}

/** Reads a whole body of a known size: a connection that breaks is a failed attempt, an abort is rethrown. */
async function readWhole<T>(res: Response, call: { signal: AbortSignal; redactor: SecretRedactor }, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (e) {
    return brokenRead(e, call);
  }
}

/** A whole-body read that failed: an abort is rethrown untouched, anything else is a broken connection. */
function brokenRead(e: unknown, call: { signal: AbortSignal; redactor: SecretRedactor }): never {
  if (call.signal.aborted) throw e;
  throw new AttemptFailure("failed", `the upstream connection broke while reading its answer: ${call.redactor.message(errorText(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
}

/** A body read up to `limit` bytes: a larger one, or a connection that breaks, is a failed attempt; an abort is rethrown. */
export async function readBounded(res: Response, limit: number, call: { signal: AbortSignal; redactor: SecretRedactor }): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length"));
  if (Number.isFinite(declared) && declared > limit) {
    await res.body?.cancel().catch(() => {});
    throw new AttemptFailure("failed", `upstream answer of ${declared} bytes exceeds the limit of ${limit}`);
  }
  if (declaredWithin(res, limit)) return new Uint8Array(await readWhole(res, call, () => res.arrayBuffer()));
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

/** One server-sent event: its `event:` name ("message" when absent) and its `data:` lines joined. */
export interface ServerSentEvent {
  event: string;
  data: string;
}

/**
 * The events of a `text/event-stream` answer, parsed as the HTML standard says (lines end in
 * LF, CRLF or CR; `:` starts a comment; one leading space of a value is dropped; a blank line
 * ends an event) and bounded: one event's data at most `maxEventChars`, the whole body at most
 * `maxTotalBytes`. A broken connection is a failed attempt; an abort is rethrown untouched.
 */
export async function* readServerSentEvents(
  res: Response,
  limits: { maxEventChars: number; maxTotalBytes: number },
  call: Pick<UpstreamCall, "signal" | "redactor">,
): AsyncGenerator<ServerSentEvent> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buffer = "";
  let total = 0;
  let event = "";
  let data: string[] = [];
  let dataChars = 0;
  let scanned = 0;
  const reader = res.body.getReader();
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (call.signal.aborted) throw e;
        throw new AttemptFailure("failed", `the upstream connection broke while streaming its answer: ${call.redactor.message(errorText(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
      }
      if (chunk.done) {
        buffer += decoder.decode();
      } else {
        total += chunk.value.byteLength;
        if (total > limits.maxTotalBytes) throw new AttemptFailure("failed", `upstream stream exceeds the limit of ${limits.maxTotalBytes} bytes`);
        buffer += decoder.decode(chunk.value, { stream: true });
      }
      let start = 0;
      for (;;) {
        // No line end before `scanned`: a long line (a partial image) is searched once, not once per chunk.
        const from = Math.max(start, scanned);
        const cr = buffer.indexOf("\r", from);
        const lf = buffer.indexOf("\n", from);
        const end = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf);
        // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
        if (end === -1 || (end === cr && end === buffer.length - 1 && !chunk.done)) {
          scanned = end === -1 ? buffer.length : end;
          break;
        }
        const line = buffer.slice(start, end);
        start = end + (buffer[end] === "\r" && buffer[end + 1] === "\n" ? 2 : 1);
        if (line === "") {
          const joined = data.join("\n");
          if (joined !== "") yield { event: event || "message", data: joined };
          event = "";
          data = [];
          dataChars = 0;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") {
          dataChars += value.length + 1;
          if (dataChars > limits.maxEventChars) throw new AttemptFailure("failed", `an upstream event exceeds the limit of ${limits.maxEventChars} characters`);
          data.push(value);
        }
      }
      buffer = buffer.slice(start);
      scanned -= start;
      // A line that never ends is bounded like an event.
      if (buffer.length > limits.maxEventChars + 16) throw new AttemptFailure("failed", `an upstream event exceeds the limit of ${limits.maxEventChars} characters`);
      if (chunk.done) {
        // The standard drops an event the stream ended in the middle of.
        return;
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/**
 * Downloads an image an upstream answered with as a URL, bounded in size and time. A `data:`
 * URL carries the image itself (Replicate's sync mode answers its output so): it is decoded,
 * within the same size limit, without a request.
 */
export async function downloadImage(
  url: string,
  opts: { maxBytes: number; timeoutMs: number; signal: AbortSignal; redactor: SecretRedactor },
): Promise<Uint8Array> {
  if (/^data:/i.test(url)) return imageFromDataUrl(url, opts.maxBytes);
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

/**
 * The bytes of a `data:image/…;base64,` URL, at most `maxBytes` (checked on the text before it
 * is decoded); any other data URL, or base64 that is not strict, is a failed attempt.
 */
export function imageFromDataUrl(url: string, maxBytes: number): Uint8Array {
  // The head our own uploads are read by (core/imageInput's DATA_URL).
  const head = DATA_URL.exec(url);
  if (!head) throw new AttemptFailure("failed", "upstream answered with a data URL that is not a base64 image");
  const b64Length = url.length - head[0].length;
  if (b64Length > Math.ceil(maxBytes / 3) * 4) throw new AttemptFailure("failed", `upstream image of about ${Math.floor((b64Length * 3) / 4)} bytes exceeds the limit of ${maxBytes}`);
  const bytes = decodeBase64Image(url.slice(head[0].length));
  if (bytes.byteLength > maxBytes) throw new AttemptFailure("failed", `upstream image of ${bytes.byteLength} bytes exceeds the limit of ${maxBytes}`);
  return bytes;
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
/**
 * Downloads an image an upstream answered with as a URL, within what is left of the attempt's
 * deadline and the upstream's download limits.
 */
export function downloadWithinAttempt(
  upstream: Pick<UpstreamConfig, "max_download_bytes" | "download_timeout_ms">,
  ctx: { signal: AbortSignal; deadline: number },
  url: string,
  redactor: SecretRedactor,
  now: () => number,
): Promise<Uint8Array> {
  const remaining = Math.max(1, ctx.deadline - now());
  return downloadImage(url, { maxBytes: upstream.max_download_bytes, timeoutMs: Math.min(upstream.download_timeout_ms, remaining), signal: ctx.signal, redactor });
}

export function checkUpstreamImage(bytes: Uint8Array, revisedPrompt?: string): GeneratedImage {
  const mime = sniffImageMime(bytes);
  if (!mime) throw new AttemptFailure("failed", "upstream returned bytes that are not a PNG, JPEG or WebP image");
  const dims = readDimensions(bytes, mime);
  if (!dims || dims.width < 1 || dims.height < 1) throw new AttemptFailure("failed", `upstream returned a ${mime} whose header is unreadable`);
  return { bytes, mime, width: dims.width, height: dims.height, ...(revisedPrompt !== undefined ? { revisedPrompt } : {}) };
}

/**
 * An intermediate picture an upstream showed (a streamed partial, a WebUI preview) as a progress
 * partial, checked as cheaply as checkUpstreamImage (sniff and header) and no larger than an
 * input image may be; null when it is not usable: a bad partial is skipped, it fails nothing.
 */
export function upstreamPartial(b64: string): NonNullable<ProgressReport["partial"]> | null {
  if (b64.length > Math.ceil((MAX_IMAGE_BYTES * 4) / 3) + 64) return null;
  try {
    const bytes = decodeBase64Image(b64);
    if (bytes.byteLength > MAX_IMAGE_BYTES) return null;
    const { mime, width, height } = checkUpstreamImage(bytes);
    return { bytes, mime, width, height };
  } catch {
    return null;
  }
}

/** Strict base64 (optionally a data URL) to bytes; malformed text is a failed attempt. */
export function decodeBase64Image(value: string): Uint8Array {
  const b64 = value.startsWith("data:") ? value.slice(value.indexOf(",") + 1) : value;
  const clean = b64.replace(/\s+/g, "");
  if (clean.length === 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(clean)) throw new AttemptFailure("failed", "upstream returned an image that is not valid base64");
  return new Uint8Array(Buffer.from(clean, "base64"));
}


export function joinUrl(base: string, path: string): string {
  return base.replace(/\/+$/, "") + path;
}

