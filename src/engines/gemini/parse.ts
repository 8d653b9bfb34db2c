/**
 * A generateContent answer read back (ai.google.dev/api/generate-content#generatecontentresponse):
 * the first image part (`inlineData`, or `inline_data`) of the first candidate, and its text parts
 * as the revised prompt. Parts marked `thought` are the model's drafts, not its answer.
 *
 * - `promptFeedback.blockReason` (the prompt was blocked, no candidates) and a candidate whose
 *   `finishReason` is a safety or policy stop → rejected (400 upstream_rejected, no retry: every
 *   account would be refused the same).
 * - anything else without an image (no candidates, `NO_IMAGE`, `STOP` with only text) → a
 *   failed attempt, retried on another account.
 */
import { AttemptFailure } from "../pool";
import { isPlainObject } from "../../core/values";

/** finishReason values that mean "refused for what was asked", not "something went wrong". */
const REFUSED_FINISH = new Set([
  "SAFETY",
  "IMAGE_SAFETY",
  "PROHIBITED_CONTENT",
  "IMAGE_PROHIBITED_CONTENT",
  "BLOCKLIST",
  "SPII",
  "RECITATION",
  "IMAGE_RECITATION",
]);

export interface GeminiImageAnswer {
  b64: string;
  /** The candidate's text parts joined, when it said anything. */
  text?: string;
}

/** `redact` cleans the upstream's own words (block and finish messages) before they reach an error. */
export function parseGenerateContentAnswer(answer: unknown, redact: (text: string) => string): GeminiImageAnswer {
  if (!isPlainObject(answer)) throw new AttemptFailure("failed", "upstream answer is not a JSON object");
  const feedback = isPlainObject(answer.promptFeedback) ? answer.promptFeedback : undefined;
  if (feedback && typeof feedback.blockReason === "string" && feedback.blockReason !== "BLOCK_REASON_UNSPECIFIED") {
    const detail = typeof feedback.blockReasonMessage === "string" && feedback.blockReasonMessage ? `: ${redact(feedback.blockReasonMessage)}` : "";
    throw new AttemptFailure("rejected", `the prompt was blocked (${redact(feedback.blockReason)})${detail}`);
  }
  const candidate = Array.isArray(answer.candidates) ? (answer.candidates[0] as unknown) : undefined;
  if (!isPlainObject(candidate)) throw new AttemptFailure("failed", "upstream answer has no candidates");
  const finish = typeof candidate.finishReason === "string" ? candidate.finishReason : undefined;
  const parts = isPlainObject(candidate.content) && Array.isArray(candidate.content.parts) ? candidate.content.parts : [];
  let b64: string | undefined;
  const texts: string[] = [];
  for (const part of parts) {
    if (!isPlainObject(part) || part.thought === true) continue;
    const inline = isPlainObject(part.inlineData) ? part.inlineData : isPlainObject(part.inline_data) ? part.inline_data : undefined;
    if (inline && b64 === undefined && typeof inline.data === "string") b64 = inline.data;
    if (typeof part.text === "string" && part.text.trim() !== "") texts.push(part.text.trim());
  }
  if (finish && REFUSED_FINISH.has(finish)) {
    const detail = typeof candidate.finishMessage === "string" && candidate.finishMessage ? `: ${redact(candidate.finishMessage)}` : "";
    throw new AttemptFailure("rejected", `the model refused the request (finishReason ${finish})${detail}`);
  }
  if (b64 === undefined) {
    throw new AttemptFailure("failed", `upstream answer has no image${finish ? ` (finishReason ${finish})` : ""}`);
  }
  return texts.length > 0 ? { b64, text: texts.join("\n") } : { b64 };
}
