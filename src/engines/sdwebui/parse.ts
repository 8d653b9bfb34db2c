/** WebUI answers read back: the first of `images` (base64), checked to be an image. */
import type { GeneratedImage } from "../../core/engine";
import { AttemptFailure } from "../pool";
import { checkUpstreamImage, decodeBase64Image } from "../upstreamHttp";
import { isPlainObject } from "../../core/values";

export function imageFromWebUiAnswer(answer: unknown, prompt: string): GeneratedImage {
  const images = isPlainObject(answer) && Array.isArray(answer.images) ? answer.images : null;
  const first = images?.[0];
  if (typeof first !== "string") throw new AttemptFailure("failed", "WebUI answer has no images[0]");
  return checkUpstreamImage(decodeBase64Image(first), prompt);
}
