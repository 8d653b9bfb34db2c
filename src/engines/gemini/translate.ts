/**
 * Our image job → a Gemini generateContent body (ai.google.dev/gemini-api/docs/image-generation):
 * one user turn whose parts are the prompt and then each image as `inline_data`, and a
 * generationConfig asking for TEXT and IMAGE with an imageConfig from our `size`. Pure functions.
 */
import type { ImageJob, RequestedSize } from "../../core/engine";
import { toBase64 } from "../../core/bytes";

/** The aspect ratios Gemini's image models take (imageConfig.aspectRatio). */
export const ASPECT_RATIOS = ["1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"] as const;
export type AspectRatio = (typeof ASPECT_RATIOS)[number];
export type ImageSize = "1K" | "2K" | "4K";

export interface ImageConfig {
  aspectRatio: AspectRatio;
  /** Absent for 1K: it is the default, and models without imageSize (gemini-2.5-flash-image) take it. */
  imageSize?: ImageSize;
}

/**
 * `WxH` → the supported aspect ratio nearest to W/H (compared as log(W/H), so 2:1 is as far
 * from 1:1 as 1:2 is), and the resolution tier nearest to √(W·H) on a log scale: below 1448
 * (√(1024·2048)) 1K, below 2896 2K, else 4K. null ("auto") sends no imageConfig: the model picks
 * (for an edit, the input image's ratio).
 */
export function imageConfigFor(size: RequestedSize | null): ImageConfig | null {
  if (!size) return null;
  const target = Math.log(size.width / size.height);
  let best: AspectRatio = "1:1";
  let bestDistance = Infinity;
  for (const ratio of ASPECT_RATIOS) {
    const [w, h] = ratio.split(":").map(Number) as [number, number];
    const distance = Math.abs(Math.log(w / h) - target);
    if (distance < bestDistance - 1e-12) {
      best = ratio;
      bestDistance = distance;
    }
  }
  const side = Math.sqrt(size.width * size.height);
  const imageSize: ImageSize = side < 1448 ? "1K" : side < 2896 ? "2K" : "4K";
  return imageSize === "1K" ? { aspectRatio: best } : { aspectRatio: best, imageSize };
}

/** The generateContent body: prompt first, then the images (for an edit the first is the one edited). */
export function generateContentBody(job: Pick<ImageJob, "prompt" | "images" | "size">): Record<string, unknown> {
  const parts: Record<string, unknown>[] = [{ text: job.prompt }];
  for (const img of job.images) parts.push({ inline_data: { mime_type: img.mime, data: toBase64(img.bytes) } });
  const generationConfig: Record<string, unknown> = { responseModalities: ["TEXT", "IMAGE"] };
  const imageConfig = imageConfigFor(job.size);
  if (imageConfig) generationConfig.imageConfig = imageConfig;
  return { contents: [{ role: "user", parts }], generationConfig };
}
