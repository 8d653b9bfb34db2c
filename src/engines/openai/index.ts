/**
 * The `openai` upstream kind: OpenAI itself or anything speaking its API (LocalAI, vLLM,
 * Ollama for chat). Translates our jobs to its requests and its answers back:
 *
 * - chat → POST {base_url}/chat/completions, params passed through, model mapped;
 * - generation without references → POST /images/generations (JSON);
 * - generation with references → POST /images/edits (multipart, one `image[]` part each),
 *   because the generations endpoint takes no images;
 * - edit → POST /images/edits with `image` (one) or `image[]` (several) and `mask`;
 * - a `url` answer is downloaded (bounded) and returned as bytes; `revised_prompt` passes through.
 *
 * Every string of an answer that reaches our client (`revised_prompt`, the chat message) and
 * every error text goes through the redactor first: an upstream may echo our key.
 */
import type { UpstreamConfig } from "../../config";
import { AccountAuth } from "../credentials";
import type { AccountPool, AttemptContext, Clock } from "../pool";
import { AttemptFailure } from "../pool";
import { SecretRedactor } from "../redact";
import type { ChatEngine, ChatJob, ChatResult, GeneratedImage, ImageEngine, ImageInput, ImageJob } from "../../core/engine";
import { callJson, checkUpstreamImage, decodeBase64Image, downloadImage, joinUrl } from "../upstreamHttp";

/** Fields we set ourselves; a client's copy of them is not passed through. */
const OWN_IMAGE_FIELDS = new Set(["model", "prompt", "n", "size", "quality", "image", "image[]", "mask", "response_format", "stream"]);
const OWN_CHAT_FIELDS = new Set(["model", "messages", "stream", "n"]);

const FINISH_REASONS = new Set(["stop", "length", "content_filter", "tool_calls"]);

export class OpenAIEngine implements ImageEngine, ChatEngine {
  private readonly auth: AccountAuth;

  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    private readonly clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    private readonly redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
  ) {
    this.auth = new AccountAuth(upstream.accounts);
  }

  async chat(job: ChatJob): Promise<ChatResult> {
    const body: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(job.params)) if (!OWN_CHAT_FIELDS.has(k) && v !== undefined) body[k] = v;
    body.model = job.model.upstreamModel;
    body.messages = job.messages;
    body.stream = false;
    const { value, trace } = await this.pool.run(async (ctx) => {
      const answer = await callJson({
        ...this.request(ctx, "/chat/completions"),
        headers: { ...this.authHeaders(ctx), "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const parsed = parseChatAnswer(answer);
      return { ...parsed, content: this.redactor.answer(parsed.content) };
    }, job.signal);
    return { ...value, trace };
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    if (job.images.length === 0) return this.imageCall(job, "generations", "image[]");
    return this.imageCall(job, "edits", "image[]");
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.imageCall(job, "edits", job.images.length === 1 ? "image" : "image[]");
  }

  private async imageCall(job: ImageJob, endpoint: "generations" | "edits", imageField: "image" | "image[]"): Promise<GeneratedImage> {
    const fields = this.imageFields(job);
    const { value, trace } = await this.pool.run(async (ctx) => {
      const base = this.request(ctx, `/images/${endpoint}`);
      const answer =
        endpoint === "generations"
          ? await callJson({ ...base, headers: { ...this.authHeaders(ctx), "content-type": "application/json" }, body: JSON.stringify(fields) })
          : await callJson({ ...base, headers: this.authHeaders(ctx), body: editForm(fields, job.images, job.mask, imageField) });
      return this.imageFromAnswer(answer, ctx, job.prompt);
    }, job.signal);
    return { ...value, trace };
  }

  private imageFields(job: ImageJob): Record<string, unknown> {
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

  private async imageFromAnswer(answer: unknown, ctx: AttemptContext, prompt: string): Promise<GeneratedImage> {
    const first = isRecord(answer) && Array.isArray(answer.data) ? (answer.data[0] as unknown) : undefined;
    if (!isRecord(first)) throw new AttemptFailure("failed", "upstream image answer has no data[0]");
    const revised = typeof first.revised_prompt === "string" && first.revised_prompt.length > 0 ? this.redactor.answer(first.revised_prompt) : prompt;
    let bytes: Uint8Array;
    if (typeof first.b64_json === "string") {
      bytes = decodeBase64Image(first.b64_json);
    } else if (typeof first.url === "string") {
      const remaining = Math.max(1, ctx.deadline - this.clock());
      bytes = await downloadImage(first.url, {
        maxBytes: this.upstream.max_download_bytes,
        timeoutMs: Math.min(this.upstream.download_timeout_ms, remaining),
        signal: ctx.signal,
        redactor: this.redactor,
      });
    } else {
      throw new AttemptFailure("failed", "upstream image answer has neither b64_json nor url");
    }
    return checkUpstreamImage(bytes, revised);
  }

  private request(ctx: AttemptContext, path: string) {
    return {
      url: joinUrl(this.upstream.base_url, path),
      signal: ctx.signal,
      redactor: this.redactor,
      now: this.clock,
      rejectStatuses: [400, 413, 415, 422],
    };
  }

  /** The account's credentials (credentials.ts: one order for every kind) and what we accept. */
  private authHeaders(ctx: AttemptContext): Record<string, string> {
    return { ...this.auth.headersFor(ctx.account.id), accept: "application/json" };
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function extension(mime: ImageInput["mime"]): string {
  return mime === "image/png" ? "png" : mime === "image/jpeg" ? "jpg" : "webp";
}

/**
 * The multipart body of /images/edits. An edit of one image sends it as `image` (what every
 * OpenAI-compatible server accepts); reference images, or several images, go as repeated
 * `image[]` parts, one per image.
 */
function editForm(fields: Record<string, unknown>, images: ImageInput[], mask: ImageInput | undefined, name: "image" | "image[]"): FormData {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) form.append(k, typeof v === "string" ? v : JSON.stringify(v));
  images.forEach((img, i) => form.append(name, new Blob([img.bytes as Uint8Array<ArrayBuffer>], { type: img.mime }), `image-${i + 1}.${extension(img.mime)}`));
  if (mask) form.append("mask", new Blob([mask.bytes as Uint8Array<ArrayBuffer>], { type: mask.mime }), `mask.${extension(mask.mime)}`);
  return form;
}

function parseChatAnswer(answer: unknown): Omit<ChatResult, "trace"> {
  const choice = isRecord(answer) && Array.isArray(answer.choices) ? (answer.choices[0] as unknown) : undefined;
  if (!isRecord(choice) || !isRecord(choice.message)) throw new AttemptFailure("failed", "upstream chat answer has no choices[0].message");
  const content = choice.message.content;
  if (typeof content !== "string" && content !== null) throw new AttemptFailure("failed", "upstream chat answer's message content is not text");
  const reason = typeof choice.finish_reason === "string" && FINISH_REASONS.has(choice.finish_reason) ? choice.finish_reason : "stop";
  const usage = isRecord(answer) && isRecord(answer.usage) ? answer.usage : {};
  const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);
  return {
    content: content ?? "",
    finishReason: reason as ChatResult["finishReason"],
    usage: { promptTokens: count(usage.prompt_tokens), completionTokens: count(usage.completion_tokens) },
  };
}
