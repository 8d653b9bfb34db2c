/**
 * The answer to a successful image request, in OpenAI's shape: the synchronous 200 body, which
 * is also a task's `result` and what an Idempotency-Key replays.
 */
import type { ImageMime, ImageJob } from "./engine";
import type { ImageOutcome } from "./imageRequests";
import type { ImageKeeper } from "./imageArchive";

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

/**
 * A result as a task keeps it: the image itself stays in the image store (named by image_id), so
 * the task row holds a few hundred bytes instead of the base64. A result whose image could not
 * be kept carries it inline.
 */
export function resultForStorage(body: ImageResultBody): string {
  if (!body.image_id) return JSON.stringify(body);
  return JSON.stringify({ ...body, data: body.data.map((d) => ({ revised_prompt: d.revised_prompt })) });
}

/** A kept result with its image inline again; null when the image is no longer kept. */
export async function resultFromStorage(text: string, images: Pick<ImageKeeper, "open"> | undefined): Promise<ImageResultBody | null> {
  const body = JSON.parse(text) as ImageResultBody;
  if (body.data.every((d) => "b64_json" in d || "url" in d)) return body;
  const kept = body.image_id && images ? await images.open(body.image_id) : null;
  if (!kept) return null;
  const b64 = Buffer.from(kept.bytes.buffer, kept.bytes.byteOffset, kept.bytes.byteLength).toString("base64");
  return { ...body, data: body.data.map((d) => ({ b64_json: b64, revised_prompt: d.revised_prompt })) };
}
