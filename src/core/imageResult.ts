/**
 * The answer to a successful image request, in OpenAI's shape: the synchronous 200 body, which
 * is also a task's `result` and what an Idempotency-Key replays.
 */
import type { ImageMime, ImageJob, ImageUsage } from "./engine";
import type { ImageOutcome } from "./imageRequests";
import type { ImageKeeper } from "./imageArchive";
import { toBase64 } from "./bytes";

/** OpenAI's `output_format` name of each image type (the answer, the stream events). */
export const OUTPUT_FORMAT: Record<ImageMime, "png" | "jpeg" | "webp"> = { "image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp" };

/** The image type an `output_format` names. */
export function mimeOfOutputFormat(format: ImageResultBody["output_format"]): ImageMime {
  return format === "jpeg" ? "image/jpeg" : format === "webp" ? "image/webp" : "image/png";
}

export interface ImageResultBody {
  /** The request's id (x-request-id, the history row, the ledger's request_id, the log lines, a task's id): a field OpenAI's clients ignore. */
  id: string;
  created: number;
  generation_time_ms: number;
  data: ({ b64_json: string; revised_prompt: string } | { url: string; revised_prompt: string })[];
  /** The kept image's id (core/imageArchive): a field OpenAI's clients ignore; also the x-image-id header. */
  image_id?: string;
  size: string;
  quality: string;
  output_format: "png" | "jpeg" | "webp";
  /** The upstream's token usage, when it reported one (OpenAI's GPT image models). */
  usage?: ImageUsage;
}

/**
 * The 200 body. `inline` (the default) carries the image as base64; `by_id` leaves it out, for
 * an image that is kept (it is named by image_id): how a task stores its result, and the start
 * of a `url` answer, so neither encodes megabytes of base64 only to drop them.
 */
export function imageResultBody(
  requestId: string,
  outcome: ImageOutcome,
  job: Pick<ImageJob, "prompt" | "quality">,
  now: number,
  image: "inline" | "by_id" = "inline",
): ImageResultBody {
  const { image: generated } = outcome;
  const revised_prompt = generated.revisedPrompt ?? job.prompt;
  const byId = image === "by_id" && outcome.stored !== undefined;
  return {
    id: requestId,
    created: Math.floor(now / 1000),
    generation_time_ms: outcome.generationMs,
    // A by_id body never leaves as it is: it is stored (and made inline again on reading) or given its url.
    data: [byId ? ({ revised_prompt } as ImageResultBody["data"][number]) : { b64_json: toBase64(generated.bytes), revised_prompt }],
    size: `${generated.width}x${generated.height}`,
    quality: job.quality,
    output_format: OUTPUT_FORMAT[generated.mime],
    ...(outcome.stored ? { image_id: outcome.stored.id } : {}),
    ...(generated.usage ? { usage: generated.usage } : {}),
  };
}


/** The same answer with the image as a link (`response_format: "url"`) instead of inline. */
export function withImageUrl(body: ImageResultBody, url: string): ImageResultBody {
  return { ...body, data: body.data.map((d) => ({ url, revised_prompt: d.revised_prompt })) };
}

/**
 * A result as a task keeps it: the image itself stays in the image store (named by image_id), so
 * the task row holds a few hundred bytes instead of the base64. A result whose image could not
 * be kept carries it inline.
 */
export function resultForStorage(requestId: string, outcome: ImageOutcome, job: Pick<ImageJob, "prompt" | "quality">, now: number): string {
  return JSON.stringify(imageResultBody(requestId, outcome, job, now, "by_id"));
}

/**
 * A kept result with its image inline again; null when the image is no longer kept. `requestId`
 * (the task's) fills in the id of a result stored before answers carried it.
 */
export async function resultFromStorage(text: string, images: Pick<ImageKeeper, "open"> | undefined, requestId: string): Promise<ImageResultBody | null> {
  const body = { ...(JSON.parse(text) as ImageResultBody) };
  body.id ??= requestId;
  if (body.data.every((d) => "b64_json" in d || "url" in d)) return body;
  const kept = body.image_id && images ? await images.open(body.image_id) : null;
  if (!kept) return null;
  const b64 = toBase64(kept.bytes);
  return { ...body, data: body.data.map((d) => ({ b64_json: b64, revised_prompt: d.revised_prompt })) };
}
