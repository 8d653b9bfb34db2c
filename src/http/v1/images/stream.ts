/**
 * The streamed answer of an image request (`stream: true`), in OpenAI's own convention, so the
 * official clients' `images.generate({ stream: true })` and `images.edit({ stream: true })` work
 * unmodified. The body is `text/event-stream`:
 *
 *   event: image_generation.partial_image      (image_edit.partial_image for edits)
 *   data: {"type":…,"b64_json":…,"partial_image_index":0,"size","quality","background","output_format","created_at"}
 *   … one per partial image the engine shows, at most `partial_images` (0–3) …
 *   event: image_generation.completed          (image_edit.completed)
 *   data: {"type":…,"b64_json":…,"size","quality","background","output_format","created_at","generation_time_ms","usage"?}
 *
 * or, when the generation fails after the charge (the flow has refunded it by then),
 * `event: error` with `{"type":"error","error":{message,type,param,code}}`, which the clients
 * raise as an APIError. A comment line goes out whenever nothing was written for `heartbeatMs`
 * (15 s by default), so proxies do not close a stream that is quiet while the engine works.
 *
 * Everything before the charge (validation, 402, 429, a corrupt upload, the engine's own input
 * limits) is answered as usual, with its status and JSON error: the stream starts only once the
 * engine does, and the engine runs only after the charge.
 * A client that goes away ends only the stream: the generation goes on as the flow's background
 * work and its outcome is recorded like any other request's.
 */
import type { Clock } from "../../../core/clock";
import type { EngineLookup, ProgressReport } from "../../../core/engine";
import { readDimensions } from "../../../core/image/dimensions";
import { sniffImageMime } from "../../../core/imageInput";
import { runImageRequest, type ImageFlowDeps, type ImageOutcome, type ImageRequest } from "../../../core/imageRequests";
import { MAX_IMAGE_BYTES, MAX_PARTIAL_IMAGES } from "../../../core/limits";
import type { Logger } from "../../../logger";
import { apiErrorOf } from "../../errorMapping";
import { serverError } from "../../errors";
import { OUTPUT_FORMAT } from "../../../core/imageResult";
import { toBase64 } from "../../../core/bytes";
import { EventStream, eventStreamResponse } from "../../eventStream";

export interface ImageStreamDeps {
  flow: ImageFlowDeps;
  clock: Clock;
  logger: Logger;
  /** Longest silence on the stream before a comment line is sent. */
  heartbeatMs: number;
}

const BACKGROUNDS = new Set(["transparent", "opaque", "auto"]);

/**
 * Runs the request and answers with its event stream once the engine has started; a failure
 * before that (nothing charged) is thrown, for the usual JSON error answer.
 */
export async function streamImageAnswer(deps: ImageStreamDeps, req: ImageRequest, clientSignal: AbortSignal): Promise<Response> {
  const prefix = req.kind === "edit" ? "image_edit" : "image_generation";
  const wanted = Math.min(req.job.partialImages ?? 0, MAX_PARTIAL_IMAGES);
  const requested = { quality: req.job.quality, background: backgroundOf(req.job.extra.background) };
  const createdAt = () => Math.floor(deps.clock() / 1000);
  const stream = new EventStream(deps.heartbeatMs);

  let shown = 0;
  const listener = req.job.onProgress;
  // The engine contract: calling onProgress never throws into the engine.
  const onProgress = (report: ProgressReport) => {
    try {
      listener?.(report);
    } catch {
      // another listener's failure is not the stream's
    }
    if (!report.partial || shown >= wanted || stream.closed) return;
    const partial = checkedPartial(report.partial);
    if (!partial) return;
    stream.event(`${prefix}.partial_image`, {
      type: `${prefix}.partial_image`,
      b64_json: toBase64(partial.bytes),
      partial_image_index: shown++,
      size: `${partial.width}x${partial.height}`,
      ...requested,
      output_format: OUTPUT_FORMAT[partial.mime],
      created_at: createdAt(),
    });
  };

  let engineStarted = false;
  let announce!: () => void;
  const started = new Promise<void>((resolve) => (announce = resolve));
  const flow = { ...deps.flow, engines: announcingStart(deps.flow.engines, () => ((engineStarted = true), announce())) };
  const outcome = runImageRequest(flow, { ...req, job: { ...req.job, onProgress } }, clientSignal);
  await Promise.race([started, outcome.then(noop, noop)]);
  if (!engineStarted) {
    // Failed before the engine ran, so before the charge: the usual answer, no stream.
    try {
      await outcome;
    } catch (e) {
      stream.close();
      throw e;
    }
  }

  stream.startHeartbeat();
  outcome
    .then(
      (done: ImageOutcome) => {
        const { image } = done;
        stream.event(`${prefix}.completed`, {
          type: `${prefix}.completed`,
          b64_json: toBase64(image.bytes),
          size: `${image.width}x${image.height}`,
          ...requested,
          output_format: OUTPUT_FORMAT[image.mime],
          created_at: createdAt(),
          generation_time_ms: done.generationMs,
          // Ours, beside OpenAI's fields (clients ignore them), as in the JSON answer: the request id and the kept image.
          id: req.requestId,
          ...(done.stored ? { image_id: done.stored.id } : {}),
          // OpenAI's token usage, when the upstream reported it (an engine that counts no tokens has none).
          ...(image.usage ? { usage: image.usage } : {}),
        });
      },
      (e: unknown) => {
        const known = apiErrorOf(e);
        if (!known) deps.logger.error("streamed image request failed unexpectedly", { request_id: req.requestId, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
        stream.event("error", { type: "error", error: (known ?? serverError()).body().error });
      },
    )
    .finally(() => stream.close());

  return eventStreamResponse(stream);
}

/** The engine lookup, telling when a generation reaches its engine (which the flow calls only after the charge). */
function announcingStart(engines: EngineLookup, started: () => void): EngineLookup {
  return {
    imageEngine(model) {
      const engine = engines.imageEngine(model);
      if (!engine) return undefined;
      return {
        generate: (job) => (started(), engine.generate(job)),
        edit: (job) => (started(), engine.edit(job)),
        inputProblem: engine.inputProblem?.bind(engine),
      };
    },
    chatEngine: (model) => engines.chatEngine(model),
  };
}

/**
 * A partial is shown only if it is what it claims, checked cheaply (sniff and header; the
 * final image gets the full decode) and no larger than an input image may be.
 */
function checkedPartial(partial: NonNullable<ProgressReport["partial"]>): NonNullable<ProgressReport["partial"]> | null {
  const { bytes } = partial;
  if (!(bytes instanceof Uint8Array) || bytes.byteLength === 0 || bytes.byteLength > MAX_IMAGE_BYTES) return null;
  try {
    const mime = sniffImageMime(bytes);
    if (!mime || mime !== partial.mime) return null;
    const dims = readDimensions(bytes, mime);
    if (!dims || dims.width !== partial.width || dims.height !== partial.height) return null;
  } catch {
    return null;
  }
  return partial;
}

function backgroundOf(value: unknown): "transparent" | "opaque" | "auto" {
  return typeof value === "string" && BACKGROUNDS.has(value) ? (value as "transparent" | "opaque" | "auto") : "auto";
}


function noop(): void {}
