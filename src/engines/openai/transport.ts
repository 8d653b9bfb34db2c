/**
 * How the `openai` kind is reached: the endpoints under `base_url`, the headers, which answer
 * statuses refuse the request itself, and the bounded download of `url` answers.
 */
import type { UpstreamConfig } from "../../config";
import type { AttemptContext } from "../pool";
import type { AccountAuth } from "../credentials";
import type { SecretRedactor } from "../redact";
import { callJson, callUpstream, downloadWithinAttempt, joinUrl, readJson, readServerSentEvents, type JsonReader, type ServerSentEvent, type UpstreamCall } from "../upstreamHttp";
import type { Clock } from "../../core/clock";

export const CHAT_PATH = "/chat/completions";
export const IMAGE_PATHS = { generations: "/images/generations", edits: "/images/edits" } as const;
export type ImageEndpoint = keyof typeof IMAGE_PATHS;

/**
 * Statuses that refuse the request itself (content policy, a size the model does not take, a
 * body the server will not parse): another account would refuse it too, so no retry.
 */
export const REJECT_STATUSES = [400, 413, 415, 422];

/** A streamed request's whole answer (a few partials and the image, as base64) at most this big. */
const MAX_STREAM_BYTES = 256 * 1024 * 1024;

/**
 * A streamed chat answer's bounds: one chunk (a piece of text or of a tool call's arguments)
 * at most 1 MiB, the whole stream at most 32 MiB, far beyond any reply a token limit allows.
 */
export const CHAT_STREAM_LIMITS = { maxEventChars: 1024 * 1024, maxTotalBytes: 32 * 1024 * 1024 };

/** What a request sent with `stream: true` got back: events, or one JSON answer from an upstream that does not stream. */
export type StreamedAnswer = { events: AsyncGenerator<ServerSentEvent> } | { json: unknown };

export class OpenAITransport {
  /** Each endpoint's URL and each account's JSON headers, built once: every request sends them (fetch copies, never changes them). */
  private readonly urls = new Map<string, string>();
  private readonly jsonHeaders = new Map<string, Readonly<Record<string, string>>>();

  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly auth: AccountAuth,
    private readonly redactor: SecretRedactor,
    private readonly clock: Clock,
  ) {}

  /** POSTs a JSON body; the parsed JSON answer of a 2xx (as `read` makes it), else an AttemptFailure. */
  postJson<T = unknown>(ctx: AttemptContext, path: string, json: string, read?: JsonReader<T>): Promise<T> {
    let headers = this.jsonHeaders.get(ctx.account.id);
    if (!headers) this.jsonHeaders.set(ctx.account.id, (headers = Object.freeze(this.headers(ctx.account.id, { accept: "application/json", "content-type": "application/json" }))));
    return callJson(this.call(ctx, path, json, headers), read);
  }

  /** POSTs a multipart form (fetch writes its Content-Type with the boundary). */
  postForm(ctx: AttemptContext, path: string, form: FormData): Promise<unknown> {
    return this.post(ctx, path, form, {});
  }

  /**
   * Downloads an image answered as a URL, without our credentials, within the upstream's
   * download limits and what is left of the attempt.
   */
  download(ctx: AttemptContext, url: string): Promise<Uint8Array> {
    return downloadWithinAttempt(this.upstream, ctx, url, this.redactor, this.clock);
  }

  /**
   * POSTs a request sent with `stream: true` (a JSON body, or a FormData whose Content-Type
   * fetch writes); the events are read within `limits` (an image stream's by default).
   */
  async postStreamed(ctx: AttemptContext, path: string, body: string | FormData, limits = this.imageStreamLimits()): Promise<StreamedAnswer> {
    const contentType: Record<string, string> = typeof body === "string" ? { "content-type": "application/json" } : {};
    const call = this.call(ctx, path, body, this.headers(ctx.account.id, { ...contentType, accept: "text/event-stream, application/json" }));
    const res = await callUpstream(call);
    if (!(res.headers.get("content-type") ?? "").toLowerCase().startsWith("text/event-stream")) return { json: await readJson(res, call) };
    return { events: readServerSentEvents(res, limits, call) };
  }

  /** An image stream's bounds: one event may carry an image as large as a download may be. */
  private imageStreamLimits() {
    return { maxEventChars: Math.ceil((this.upstream.max_download_bytes * 4) / 3) + 64 * 1024, maxTotalBytes: MAX_STREAM_BYTES };
  }

  private post(ctx: AttemptContext, path: string, body: BodyInit, contentType: Record<string, string>): Promise<unknown> {
    return callJson(this.call(ctx, path, body, this.headers(ctx.account.id, { accept: "application/json", ...contentType })));
  }

  /** The account's credentials, then the request's own headers. */
  private headers(accountId: string, own: Record<string, string>): Record<string, string> {
    return { ...this.auth.headersFor(accountId), ...own };
  }

  private url(path: string): string {
    let url = this.urls.get(path);
    if (url === undefined) this.urls.set(path, (url = joinUrl(this.upstream.base_url, path)));
    return url;
  }

  private call(ctx: AttemptContext, path: string, body: BodyInit, headers: Readonly<Record<string, string>>): UpstreamCall {
    return new AttemptCall(this.url(path), headers, body, ctx, this.redactor, this.clock);
  }
}

/**
 * One call of an attempt. Its `signal` is read only by fetch (the keep-alive client listens to
 * the attempt's scope instead), so it is a getter, on a class: an object literal's getter is
 * defined anew on every request (engines/pool's ScopedAttempt says what that costs).
 */
class AttemptCall implements UpstreamCall {
  readonly cancel: AttemptContext["cancel"];
  readonly rejectStatuses = REJECT_STATUSES;

  constructor(
    readonly url: string,
    readonly headers: Readonly<Record<string, string>>,
    readonly body: BodyInit,
    private readonly ctx: AttemptContext,
    readonly redactor: SecretRedactor,
    readonly now: Clock,
  ) {
    this.cancel = ctx.cancel;
  }

  get signal(): AbortSignal {
    return this.ctx.signal;
  }
}
