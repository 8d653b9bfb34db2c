/**
 * The answer to a successful image request, in OpenAI's shape: the synchronous 200 body, which
 * is also a task's `result` and what an Idempotency-Key replays.
 */
import type { ImageMime, ImageJob } from "./engine";
import type { ImageOutcome } from "./imageRequests";

const OUTPUT_FORMAT: Record<ImageMime, "png" | "jpeg" | "webp"> = { "image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp" };

export interface ImageResultBody {
  created: number;
  generation_time_ms: number;
  data: ({ b64_json: string; revised_prompt: string } | { url: string; revised_prompt: string })[];
  /** The kept image's id (core/imageArchive): a field OpenAI's clients ignore; also the x-image-id header. */
  image_id?: string;
  size: string;
  quality: string;
  output_format: "png" | "jpeg" | "webp";
}

export function imageResultBody(outcome: ImageOutcome, job: Pick<ImageJob, "prompt" | "quality">, now: number): ImageResultBody {
  const { image } = outcome;
  return {
    created: Math.floor(now / 1000),
    generation_time_ms: outcome.generationMs,
    data: [{ b64_json: Buffer.from(image.bytes.buffer, image.bytes.byteOffset, image.bytes.byteLength).toString("base64"), revised_prompt: image.revisedPrompt ?? job.prompt }],
    size: `${image.width}x${image.height}`,
    quality: job.quality,
    output_format: OUTPUT_FORMAT[image.mime],
    ...(outcome.stored ? { image_id: outcome.stored.id } : {}),
  };
}

/** The same answer with the image as a link (`response_format: "url"`) instead of inline. */
export function withImageUrl(body: ImageResultBody, url: string): ImageResultBody {
  return { ...body, data: body.data.map((d) => ({ url, revised_prompt: d.revised_prompt })) };
}
