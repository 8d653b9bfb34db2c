/**
 * The `comfyui` upstream kind: a ComfyUI server runs the model's workflow (workflow.ts) with our
 * fields filled in. One attempt, on one account:
 *
 * 1. reference image → POST /upload/image; mask → converted (translate.ts) and POST /upload/mask
 *    onto that image; their stored names fill `{{image}}` / `{{mask}}`;
 * 2. open the websocket /ws?clientId=<a fresh client_id> (SOCKET_OPEN_TIMEOUT_MS; when it does
 *    not open, the attempt goes on without it);
 * 3. POST /prompt {prompt, client_id}; node_errors → UpstreamRejected with the nodes' messages;
 * 4. wait: websocket `progress` → onProgress fractions, binary previews → partials (spread by
 *    PartialSchedule), `executing` with node null / `execution_success` → done,
 *    `execution_error` (out of memory, a node's exception) → a failed attempt, retried on another
 *    account. GET /history/{prompt_id} decides the outcome: polled every pollMs without a
 *    websocket (or after it closed), every SOCKET_POLL_FACTOR × pollMs as a safety net with one;
 * 5. GET /view of the output node's first image, checked to be a PNG/JPEG/WebP.
 *
 * When the attempt is abandoned (the client went away, the attempt timed out) after the prompt
 * was queued, it is removed from the queue, or interrupted if it is the one running (never
 * another client's).
 */
import type { UpstreamConfig } from "../../config";
import { UpstreamRejected, type GeneratedImage, type ImageEngine, type ImageJob, type InputProblem } from "../../core/engine";
import type { Clock } from "../../core/clock";
import { AccountAuth } from "../credentials";
import { AttemptFailure, type AccountPool, type AttemptContext } from "../pool";
import { PartialSchedule, partialsWanted, reportProgress } from "../progress";
import { MAX_UPSTREAM_MESSAGE_CHARS, SecretRedactor } from "../redact";
import { checkUpstreamImage } from "../upstreamHttp";
import { historyOutcome, promptIdFrom, socketEvent, uploadedFrom, type ComfyFileRef } from "./parse";
import { comfyMaskFromOpenAI, fieldValues } from "./translate";
import { ComfyTransport } from "./transport";
import { comfyModelSettings, filledWorkflow, type ComfyField, type ComfyModelSettings } from "./workflow";
import { pauseUnlessAborted } from "../../core/deadline";

/** History polling without a websocket. */
export const HISTORY_POLL_MS = 500;
/** With a websocket, history is still read every this many poll intervals (a silent socket cannot hang us). */
const SOCKET_POLL_FACTOR = 10;
export const SOCKET_OPEN_TIMEOUT_MS = 2_000;

const EXT: Record<string, string> = { "image/png": "png", "image/jpeg": "jpg", "image/webp": "webp" };

export class ComfyUIEngine implements ImageEngine {
  private readonly transport: ComfyTransport;
  private readonly settings = new WeakMap<object, ComfyModelSettings>();

  constructor(
    upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    clock: Clock,
    private readonly redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
    private readonly pollMs = HISTORY_POLL_MS,
  ) {
    this.transport = new ComfyTransport(upstream, new AccountAuth(upstream.accounts), redactor, clock);
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job);
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job);
  }

  /** Inputs the model's workflow has no place for: a 400 before the charge. */
  inputProblem(job: Omit<ImageJob, "signal">): InputProblem | null {
    let settings: ComfyModelSettings;
    try {
      settings = this.settingsFor(job);
    } catch {
      return null; // run() refuses it with the reason
    }
    if (job.images.length > 0 && !settings.uses.has("image") && !settings.uses.has("mask")) return { image: 0, message: `model ${job.model.id} takes no input image` };
    if (job.mask && !settings.uses.has("mask")) return { image: "mask", message: `model ${job.model.id} takes no mask` };
    return null;
  }

  private settingsFor(job: Pick<ImageJob, "model">): ComfyModelSettings {
    const params = job.model.params;
    let s = this.settings.get(params);
    if (!s) {
      // config.ts checked this at startup; a model built another way is refused the same way.
      try {
        s = comfyModelSettings(params, `model ${job.model.id}: params`);
      } catch (e) {
        throw new UpstreamRejected((e as Error).message);
      }
      this.settings.set(params, s);
    }
    return s;
  }

  private async run(job: ImageJob): Promise<GeneratedImage> {
    const settings = this.settingsFor(job);
    const takes = (f: ComfyField) => settings.uses.has(f);
    // An inpainting workflow may load the mask upload alone (LoadImage gives its pixels and mask).
    if (job.images.length > 0 && !takes("image") && !takes("mask")) throw new UpstreamRejected(`model ${job.model.id} takes no input image (its workflow maps no {{image}} or {{mask}})`);
    if (job.images.length === 0 && takes("image")) throw new UpstreamRejected(`model ${job.model.id} needs an input image (its workflow maps {{image}})`);
    if (job.mask && !takes("mask")) throw new UpstreamRejected(`model ${job.model.id} takes no mask (its workflow maps no {{mask}})`);
    if (!job.mask && takes("mask")) throw new UpstreamRejected(`model ${job.model.id} needs a mask (its workflow maps {{mask}})`);
    let mask: Uint8Array | undefined;
    if (job.mask) {
      try {
        mask = await comfyMaskFromOpenAI(job.mask);
      } catch (e) {
        throw new UpstreamRejected(`the mask could not be converted for ComfyUI: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    const values = fieldValues(job);
    const schedule = new PartialSchedule(partialsWanted(job));
    const { value, trace } = await this.pool.run((ctx) => this.attempt(ctx, job, settings, values, mask, schedule), job.signal);
    return { ...value, trace };
  }

  private async attempt(
    ctx: AttemptContext,
    job: ImageJob,
    settings: ComfyModelSettings,
    values: Partial<Record<ComfyField, string | number>>,
    mask: Uint8Array | undefined,
    schedule: PartialSchedule,
  ): Promise<GeneratedImage> {
    const filled = { ...values };
    const base = job.images[0];
    if (base) {
      const tag = crypto.randomUUID();
      const image = uploadedFrom(await this.transport.uploadImage(ctx, base.bytes, `atelier-${tag}.${EXT[base.mime] ?? "png"}`, base.mime));
      filled.image = image.loadName;
      if (mask) filled.mask = uploadedFrom(await this.transport.uploadMask(ctx, mask, `atelier-${tag}-mask.png`, image.ref)).loadName;
    }
    const workflow = filledWorkflow(settings, filled);
    const clientId = crypto.randomUUID();
    let fraction = 0;
    const socket = await ComfySocket.open(this.transport.websocketUrl(clientId), this.transport.authHeaders(ctx.account), ctx.signal, (event) => {
      if (event.type === "progress") {
        fraction = event.fraction;
        reportProgress(job, { fraction });
      } else if (event.type === "preview" && schedule.isDue(fraction)) {
        let partial;
        try {
          const { bytes, mime, width, height } = checkUpstreamImage(event.bytes);
          partial = { bytes, mime, width, height };
        } catch {
          return; // a bad preview is skipped
        }
        schedule.taken();
        reportProgress(job, { fraction, partial });
      }
    });
    try {
      const promptId = promptIdFrom(await this.transport.submit(ctx, workflow, clientId));
      let output: ComfyFileRef;
      try {
        output = await this.waitForOutput(ctx, promptId, settings.outputNode, socket);
      } catch (e) {
        if (ctx.signal.aborted) void this.transport.cancel(ctx.account, promptId).catch(() => {});
        throw e;
      }
      return checkUpstreamImage(await this.transport.view(ctx, output), job.prompt);
    } finally {
      socket?.close();
    }
  }

  private async waitForOutput(ctx: AttemptContext, promptId: string, outputNode: string, socket: ComfySocket | null): Promise<ComfyFileRef> {
    for (;;) {
      const failure = socket?.failureOf(promptId);
      if (failure) throw new AttemptFailure("failed", this.redactor.message(failure, MAX_UPSTREAM_MESSAGE_CHARS));
      const outcome = historyOutcome(await this.transport.history(ctx, promptId), promptId, outputNode);
      if (outcome.state === "done") return outcome.image;
      if (outcome.state === "error") throw new AttemptFailure("failed", this.redactor.message(outcome.message, MAX_UPSTREAM_MESSAGE_CHARS));
      if (socket?.isOpen && !socket.hasEnded(promptId)) await socket.waitForNews(this.pollMs * SOCKET_POLL_FACTOR, ctx.signal);
      else await pauseUnlessAborted(this.pollMs, ctx.signal);
      if (ctx.signal.aborted) throw ctx.signal.reason ?? new Error("aborted");
    }
  }
}

/** The websocket of one attempt: events go to `onEvent`; the end (or failure) of each prompt is remembered. */
class ComfySocket {
  isOpen = false;
  private readonly ended = new Map<string, string | null>();
  private wake: (() => void) | null = null;

  private constructor(private readonly ws: WebSocket) {}

  /** The open socket, or null when it cannot be opened in time (the attempt then polls). */
  static open(url: string, headers: Record<string, string>, signal: AbortSignal, onEvent: (e: ReturnType<typeof socketEvent>) => void): Promise<ComfySocket | null> {
    return new Promise((resolve) => {
      let ws: WebSocket;
      try {
        // Bun's WebSocket takes headers (the account's Authorization, for a proxy in front of ComfyUI).
        ws = new WebSocket(url, { headers } as unknown as string[]);
      } catch {
        resolve(null);
        return;
      }
      ws.binaryType = "arraybuffer";
      const socket = new ComfySocket(ws);
      const timer = setTimeout(() => settle(null), SOCKET_OPEN_TIMEOUT_MS);
      const onAbort = () => settle(null);
      signal.addEventListener("abort", onAbort, { once: true });
      let settled = false;
      function settle(value: ComfySocket | null) {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        if (!value) socket.close();
        resolve(value);
      }
      ws.onopen = () => {
        socket.isOpen = true;
        settle(socket);
      };
      ws.onerror = () => settle(null);
      ws.onclose = () => {
        socket.isOpen = false;
        socket.poke();
        settle(null);
      };
      ws.onmessage = (m: MessageEvent) => {
        const event = socketEvent(m.data as string | ArrayBuffer);
        if ((event.type === "done" || event.type === "error") && event.promptId) {
          socket.ended.set(event.promptId, event.type === "error" ? event.message : null);
          socket.poke();
        }
        onEvent(event);
      };
    });
  }

  hasEnded(promptId: string): boolean {
    return this.ended.has(promptId);
  }

  failureOf(promptId: string): string | null {
    return this.ended.get(promptId) ?? null;
  }

  /** Resolves on the next end, failure or close, after ms, or when the signal aborts. */
  waitForNews(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        if (this.wake === done) this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.wake = done;
    });
  }

  private poke(): void {
    this.wake?.();
  }

  close(): void {
    this.isOpen = false;
    try {
      this.ws.close();
    } catch {
      // already closed
    }
  }
}

