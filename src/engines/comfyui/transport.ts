/**
 * How the `comfyui` kind is reached (ComfyUI's server.py routes under `base_url`): submitting a
 * workflow, reading its history entry, downloading an output through /view, uploading inputs,
 * removing or interrupting a prompt, and the websocket address. Statuses map as for every kind
 * (upstreamHttp callUpstream); a 400 from POST /prompt is a refusal carrying `node_errors`.
 */
import type { UpstreamConfig } from "../../config";
import type { AccountAuth } from "../credentials";
import { AttemptFailure, type AttemptContext, type PoolAccountConfig } from "../pool";
import { MAX_UPSTREAM_MESSAGE_CHARS, type SecretRedactor } from "../redact";
import { callUpstream, joinUrl, readBounded, readJson, retryAfterMs, upstreamMessage } from "../upstreamHttp";
import type { Clock } from "../../core/clock";
import { rejectionFromPromptAnswer, type ComfyFileRef } from "./parse";

export const COMFY_PATHS = {
  prompt: "/prompt",
  history: "/history/",
  view: "/view",
  uploadImage: "/upload/image",
  uploadMask: "/upload/mask",
  queue: "/queue",
  interrupt: "/interrupt",
  ws: "/ws",
} as const;

/** How long removing or interrupting an abandoned prompt may take (it runs after the attempt ended). */
const CANCEL_TIMEOUT_MS = 5_000;
const MAX_PROMPT_ERROR_BYTES = 256 * 1024;

export class ComfyTransport {
  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly auth: AccountAuth,
    private readonly redactor: SecretRedactor,
    private readonly clock: Clock,
  ) {}

  private url(path: string): string {
    return joinUrl(this.upstream.base_url, path);
  }

  private headers(account: PoolAccountConfig, extra: Record<string, string> = {}): Record<string, string> {
    return { ...this.auth.headersFor(account.id), ...extra };
  }

  /** ws(s)://…/ws?clientId=… under base_url. */
  websocketUrl(clientId: string): string {
    const u = new URL(this.url(COMFY_PATHS.ws));
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    u.searchParams.set("clientId", clientId);
    return u.toString();
  }

  authHeaders(account: PoolAccountConfig): Record<string, string> {
    return this.headers(account);
  }

  /** POST /prompt {prompt, client_id}: the prompt_id; a 400 (node_errors) is a refusal with the nodes' messages. */
  async submit(ctx: AttemptContext, workflow: unknown, clientId: string): Promise<unknown> {
    const call = { signal: ctx.signal, redactor: this.redactor };
    let res: Response;
    try {
      res = await fetch(this.url(COMFY_PATHS.prompt), {
        method: "POST",
        headers: this.headers(ctx.account, { "content-type": "application/json", accept: "application/json" }),
        body: JSON.stringify({ prompt: workflow, client_id: clientId }),
        signal: ctx.signal,
      });
    } catch (e) {
      if (ctx.signal.aborted) throw e;
      throw new AttemptFailure("failed", `could not reach the upstream: ${this.redactor.message(e instanceof Error ? e.message : String(e), MAX_UPSTREAM_MESSAGE_CHARS)}`);
    }
    if (res.ok) return readJson(res, call);
    const text = new TextDecoder().decode(await readBounded(res, MAX_PROMPT_ERROR_BYTES, { signal: ctx.signal, redactor: this.redactor }).catch(() => new Uint8Array()));
    if (res.status === 400) throw new AttemptFailure("rejected", this.redactor.message(rejectionFromPromptAnswer(text), MAX_UPSTREAM_MESSAGE_CHARS), undefined, 400);
    const body = upstreamMessage(text, this.redactor);
    if (res.status === 429) throw new AttemptFailure("rate_limited", `rate limited (429): ${body}`, retryAfterMs(res.headers, this.clock()), 429);
    if (res.status === 401 || res.status === 403) throw new AttemptFailure("auth", `credentials refused (${res.status}): ${body}`, undefined, res.status);
    throw new AttemptFailure("failed", `upstream answered ${res.status}: ${body}`, undefined, res.status);
  }

  /** GET /history/{prompt_id}: `{}` until the prompt finished. */
  async history(ctx: AttemptContext, promptId: string): Promise<unknown> {
    const call = { url: this.url(COMFY_PATHS.history + encodeURIComponent(promptId)), method: "GET" as const, headers: this.headers(ctx.account, { accept: "application/json" }), signal: ctx.signal, redactor: this.redactor, now: this.clock, rejectStatuses: [] };
    return readJson(await callUpstream(call), call, 16 * 1024 * 1024);
  }

  /** GET /view?filename&subfolder&type: the output's bytes, at most max_download_bytes. */
  async view(ctx: AttemptContext, ref: ComfyFileRef): Promise<Uint8Array> {
    const q = new URLSearchParams({ filename: ref.filename, subfolder: ref.subfolder, type: ref.type });
    const res = await callUpstream({ url: `${this.url(COMFY_PATHS.view)}?${q}`, method: "GET", headers: this.headers(ctx.account), signal: ctx.signal, redactor: this.redactor, now: this.clock, rejectStatuses: [] });
    return readBounded(res, this.upstream.max_download_bytes, { signal: ctx.signal, redactor: this.redactor });
  }

  /** POST /upload/image (multipart `image`, type input, overwrite): where ComfyUI stored it. */
  uploadImage(ctx: AttemptContext, png: Uint8Array, filename: string, mime: string): Promise<unknown> {
    const form = new FormData();
    form.append("image", new File([png as Uint8Array<ArrayBuffer>], filename, { type: mime }));
    form.append("type", "input");
    form.append("overwrite", "true");
    return this.upload(ctx, COMFY_PATHS.uploadImage, form);
  }

  /**
   * POST /upload/mask: ComfyUI copies the mask's alpha channel into the original image (named
   * by `original_ref`) and stores the result under the mask's file name.
   */
  uploadMask(ctx: AttemptContext, png: Uint8Array, filename: string, original: ComfyFileRef): Promise<unknown> {
    const form = new FormData();
    form.append("image", new File([png as Uint8Array<ArrayBuffer>], filename, { type: "image/png" }));
    form.append("type", "input");
    form.append("overwrite", "true");
    form.append("original_ref", JSON.stringify(original));
    return this.upload(ctx, COMFY_PATHS.uploadMask, form);
  }

  private async upload(ctx: AttemptContext, path: string, form: FormData): Promise<unknown> {
    const call = { url: this.url(path), headers: this.headers(ctx.account, { accept: "application/json" }), body: form, signal: ctx.signal, redactor: this.redactor, now: this.clock };
    return readJson(await callUpstream(call), call, 64 * 1024);
  }

  /**
   * Stops an abandoned prompt of ours: still queued → POST /queue {delete}; running →
   * POST /interrupt {prompt_id} (older servers interrupt whatever runs, so only when it is
   * ours). Best effort, on its own short time limit: the attempt's signal has already fired.
   */
  async cancel(account: PoolAccountConfig, promptId: string): Promise<"deleted" | "interrupted" | "gone"> {
    const signal = AbortSignal.timeout(CANCEL_TIMEOUT_MS);
    const base = { headers: this.headers(account, { "content-type": "application/json", accept: "application/json" }), signal, redactor: this.redactor, now: this.clock, rejectStatuses: [] };
    const queue = await readJson(await callUpstream({ ...base, url: this.url(COMFY_PATHS.queue), method: "GET" }), base, 16 * 1024 * 1024);
    const ids = (list: unknown) => (Array.isArray(list) ? list.map((e) => (Array.isArray(e) ? e[1] : (e as { prompt_id?: unknown } | null)?.prompt_id)) : []);
    const q = queue as { queue_running?: unknown; queue_pending?: unknown };
    if (ids(q.queue_pending).includes(promptId)) {
      await (await callUpstream({ ...base, url: this.url(COMFY_PATHS.queue), body: JSON.stringify({ delete: [promptId] }) })).body?.cancel();
      return "deleted";
    }
    if (ids(q.queue_running).includes(promptId)) {
      await (await callUpstream({ ...base, url: this.url(COMFY_PATHS.interrupt), body: JSON.stringify({ prompt_id: promptId }) })).body?.cancel();
      return "interrupted";
    }
    return "gone";
  }
}

