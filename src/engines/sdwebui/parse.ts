/**
 * WebUI answers read back: the first of `images` (base64), checked to be an image; the
 * progress answer (AUTOMATIC1111 modules/api/api.py `progressapi`, model `ProgressResponse`:
 * `progress` 0..1, `current_image` base64 or null); and one task's state (modules/progress.py
 * `progressapi`, model `ProgressResponse` of that module: `active`, `queued`, `completed`).
 */
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

export interface WebUiProgress {
  fraction: number;
  /** The live preview, base64, when the WebUI has one (its live previews setting is on). */
  currentImage: string | null;
}

/** A progress answer, or null when it is not one (progress is advisory: nothing fails on it). */
export function progressFromWebUiAnswer(answer: unknown): WebUiProgress | null {
  if (!isPlainObject(answer) || typeof answer.progress !== "number" || !Number.isFinite(answer.progress)) return null;
  const fraction = Math.min(1, Math.max(0, answer.progress));
  const image = answer.current_image;
  return { fraction, currentImage: typeof image === "string" && image.length > 0 ? image : null };
}

/**
 * Where the WebUI has one task (POST /internal/progress): `active` when it is the one running
 * (the WebUI's `current_task`), `queued` while its request waits for the WebUI's queue lock,
 * `completed` when it is among the last 16 finished; `unknown` when none holds, which is also
 * what a WebUI answers that never registered the id (before 1.8.0 the API ignored
 * `force_task_id`, or our request had not reached the queue yet).
 */
export type WebUiTaskState = "active" | "queued" | "completed" | "unknown";

/** The task's state, or null when the answer is not a task state answer (then nothing is assumed). */
export function taskStateFromWebUiAnswer(answer: unknown): WebUiTaskState | null {
  if (!isPlainObject(answer) || typeof answer.active !== "boolean" || typeof answer.queued !== "boolean" || typeof answer.completed !== "boolean") return null;
  if (answer.active) return "active";
  if (answer.queued) return "queued";
  if (answer.completed) return "completed";
  return "unknown";
}
