/**
 * Our jobs as `openai` requests: which endpoint, the JSON fields, the multipart body of
 * /images/edits. Pure functions of the job; nothing here talks to the network.
 */
import type { ChatJob, ChatMessage, ImageInput, ImageJob } from "../../core/engine";
import type { ImageEndpoint } from "./transport";

/** Fields we set ourselves; a client's copy of them is not passed through. */
const OWN_IMAGE_FIELDS = new Set(["model", "prompt", "n", "size", "quality", "image", "image[]", "mask", "response_format", "stream", "partial_images"]);
const OWN_CHAT_FIELDS = new Set(["model", "messages", "stream", "stream_options", "n"]);

/**
 * The JSON body of /chat/completions: the client's parameters (tools and tool_choice among
 * them), our model, the messages in OpenAI's shape. A streamed job asks for server-sent
 * chunks and for the usage chunk at their end, so the history can record the token counts.
 */
export function chatBody(job: ChatJob): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const params: Record<string, unknown> = job.params;
  // (for…in rather than Object.entries: no list of pairs on every request; params is a plain object of ours.)
  for (const k in params) if (!OWN_CHAT_FIELDS.has(k) && params[k] !== undefined) body[k] = params[k];
  body.model = job.model.upstreamModel;
  body.messages = job.messages.map(wireMessage);
  body.stream = job.onDelta !== undefined;
  if (job.onDelta) body.stream_options = { include_usage: true };
  return body;
}

/** One message as OpenAI's API takes it: snake_case fields; an assistant's bare tool calls with content null. */
function wireMessage(m: ChatMessage): Record<string, unknown> {
  if (m.role === "tool") return { role: "tool", content: m.content, tool_call_id: m.toolCallId };
  if (m.role === "assistant" && m.toolCalls?.length) return { role: "assistant", content: m.content === "" ? null : m.content, tool_calls: m.toolCalls };
  return { role: m.role, content: m.content };
}

export interface ImageRoute {
  endpoint: ImageEndpoint;
  /** The multipart name of the image parts (edits only). */
  imageField: "image" | "image[]";
}

/**
 * A generation without references goes to /images/generations; with references to
 * /images/edits (the generations endpoint takes no images), one `image[]` part each. An edit
 * of one image sends it as `image` (what every OpenAI-compatible server accepts), several as
 * repeated `image[]` parts.
 */
export function imageRoute(job: ImageJob, kind: "generate" | "edit"): ImageRoute {
  if (kind === "generate") return job.images.length === 0 ? { endpoint: "generations", imageField: "image[]" } : { endpoint: "edits", imageField: "image[]" };
  return { endpoint: "edits", imageField: job.images.length === 1 ? "image" : "image[]" };
}

/** The image request's fields: pass-through extras, then ours (model mapped, one image). */
export function imageFields(job: ImageJob): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(job.extra)) if (!OWN_IMAGE_FIELDS.has(k) && v !== undefined && v !== null) fields[k] = v;
  fields.model = job.model.upstreamModel;
  fields.prompt = job.prompt;
  fields.n = 1;
  if (job.size) fields.size = `${job.size.width}x${job.size.height}`;
  // "auto" is every OpenAI model's default; omitting it also keeps dall-e-2 (which rejects it) working.
  if (job.quality && job.quality !== "auto") fields.quality = job.quality;
  return fields;
}

/** The fields of a streamed request: OpenAI's `stream` and `partial_images` (1–3) added. */
export function streamedFields(fields: Record<string, unknown>, partialImages: number): Record<string, unknown> {
  return { ...fields, stream: true, partial_images: partialImages };
}

/** The multipart body of /images/edits: the fields, one part per image, and the mask. */
export function editForm(fields: Record<string, unknown>, images: ImageInput[], mask: ImageInput | undefined, name: ImageRoute["imageField"]): FormData {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) form.append(k, typeof v === "string" ? v : JSON.stringify(v));
  images.forEach((img, i) => form.append(name, new Blob([img.bytes as Uint8Array<ArrayBuffer>], { type: img.mime }), `image-${i + 1}.${extension(img.mime)}`));
  if (mask) form.append("mask", new Blob([mask.bytes as Uint8Array<ArrayBuffer>], { type: mask.mime }), `mask.${extension(mask.mime)}`);
  return form;
}

function extension(mime: ImageInput["mime"]): string {
  return mime === "image/png" ? "png" : mime === "image/jpeg" ? "jpg" : "webp";
}
