/**
 * The `openai` upstream kind: OpenAI itself or anything speaking its API (LocalAI, vLLM,
 * Ollama for chat). Each attempt is translate (translate.ts) → send (transport.ts) → read the
 * answer (parse.ts), run by the upstream's account pool:
 *
 * - chat → POST {base_url}/chat/completions, params (tools, tool_choice, …) passed through,
 *   model mapped; a streamed job is sent with `stream: true` and its chunks passed on as they
 *   come (chatStream.ts), an upstream that answers JSON instead passed on whole;
 * - generation without references → POST /images/generations (JSON);
 * - generation with references → POST /images/edits (multipart, one `image[]` part each),
 *   because the generations endpoint takes no images;
 * - edit → POST /images/edits with `image` (one) or `image[]` (several) and `mask`;
 * - a `url` answer is downloaded (bounded) and returned as bytes; `revised_prompt` and the
 *   answer's (or completed event's) `usage` pass through;
 * - a streamed job with partial images (partialImages 1–3) is sent with `stream: true` and
 *   `partial_images`: the upstream's `*.partial_image` events become progress partials and its
 *   `*.completed` event the image. An upstream that answers JSON instead (it does not stream) is
 *   read as usual, so the client gets only the completed image; one that refuses the streamed
 *   request (400-class) is asked once more without `stream`. Without partials nothing is streamed.
 *
 * Every string of an answer that reaches our client (`revised_prompt`, the chat message) and
 * every error text goes through the redactor first: an upstream may echo our key.
 */
import type { UpstreamConfig } from "../../config";
import type { ChatEngine, ChatJob, ChatResult, GeneratedImage, ImageEngine, ImageJob, ImageUsage } from "../../core/engine";
import { AccountAuth } from "../credentials";
import type { AccountPool, AttemptContext } from "../pool";
import { MAX_UPSTREAM_MESSAGE_CHARS, SecretRedactor } from "../redact";
import { checkUpstreamImage, decodeBase64Image, upstreamPartial, type ServerSentEvent } from "../upstreamHttp";
import { parseChatAnswer, parseImageAnswer, parseImageStreamEvent } from "./parse";
import { chatBody, editForm, imageFields, imageRoute, streamedFields, type ImageRoute } from "./translate";
import { CHAT_PATH, CHAT_STREAM_LIMITS, IMAGE_PATHS, OpenAITransport } from "./transport";
import { passOnWhole, replyFromChunks } from "./chatStream";
import { AttemptFailure } from "../pool";
import { partialsWanted, reportProgress } from "../progress";
import type { Clock } from "../../core/clock";

export class OpenAIEngine implements ImageEngine, ChatEngine {
  private readonly transport: OpenAITransport;

  constructor(
    upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    private readonly redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
  ) {
    this.transport = new OpenAITransport(upstream, new AccountAuth(upstream.accounts), redactor, clock);
  }

  chat(job: ChatJob): Promise<ChatResult> {
    const json = JSON.stringify(chatBody(job));
    const onDelta = job.onDelta;
    // A whole reply is read, checked and redacted in the frame that waits for the upstream, and
    // the pool sets the trace on it: no frame of this engine's own is resumed when it answers.
    if (!onDelta) return this.pool.runTraced((ctx) => this.transport.postJson(ctx, CHAT_PATH, json, this.readReply), job.cancel ?? job.signal);
    return this.pool.runTraced(async (ctx): Promise<ChatResult> => {
      const answer = await this.transport.postStreamed(ctx, CHAT_PATH, json, CHAT_STREAM_LIMITS);
      if ("events" in answer) return replyFromChunks(answer.events, onDelta, this.redactor);
      // An upstream that does not stream answered the whole reply at once.
      const reply = this.readReply(answer.json);
      passOnWhole(reply, onDelta);
      return reply;
    }, job.cancel ?? job.signal);
  }

  /** A whole chat answer as our reply (a malformed one fails the attempt), with our secrets removed. */
  private readonly readReply = (answer: unknown): ChatResult => this.redactedReply(parseChatAnswer(answer));

  /** The reply's text, refusal and tool calls (names and arguments) with our secrets removed. */
  private redactedReply(reply: ChatResult): ChatResult {
    // The reply is parseChatAnswer's own object: redacted in place.
    if (reply.content !== null) reply.content = this.redactor.answer(reply.content);
    if (reply.refusal !== undefined) reply.refusal = this.redactor.answer(reply.refusal);
    if (reply.toolCalls) reply.toolCalls = reply.toolCalls.map((c) => ({ ...c, function: { name: this.redactor.answer(c.function.name), arguments: this.redactor.answer(c.function.arguments) } }));
    return reply;
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    return this.image(job, "generate");
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.image(job, "edit");
  }

  private async image(job: ImageJob, kind: "generate" | "edit"): Promise<GeneratedImage> {
    const route = imageRoute(job, kind);
    const fields = imageFields(job);
    const path = IMAGE_PATHS[route.endpoint];
    const partials = partialsWanted(job);
    const { value, trace } = await this.pool.run(async (ctx) => {
      if (partials > 0) {
        const streamed = await this.streamedImage(ctx, job, route, fields, partials);
        if (streamed) return streamed;
      }
      const answer =
        route.endpoint === "generations"
          ? await this.transport.postJson(ctx, path, JSON.stringify(fields))
          : await this.transport.postForm(ctx, path, editForm(fields, job.images, job.mask, route.imageField));
      return this.imageFromAnswer(answer, ctx, job.prompt);
    }, job.signal);
    return { ...value, trace };
  }

  /** One attempt with `stream: true`; null when the upstream refused the streamed request (ask again without). */
  private async streamedImage(ctx: AttemptContext, job: ImageJob, route: ImageRoute, fields: Record<string, unknown>, partials: number): Promise<GeneratedImage | null> {
    const body = streamedFields(fields, partials);
    let answer;
    try {
      answer = await this.transport.postStreamed(
        ctx,
        IMAGE_PATHS[route.endpoint],
        route.endpoint === "generations" ? JSON.stringify(body) : editForm(body, job.images, job.mask, route.imageField),
      );
    } catch (e) {
      if (e instanceof AttemptFailure && e.kind === "rejected") return null;
      throw e;
    }
    if ("json" in answer) return this.imageFromAnswer(answer.json, ctx, job.prompt);
    return this.imageFromEvents(answer.events, job, partials);
  }

  /** Partials pass through as progress (at most `partials`, bad ones skipped); the completed event is the image. */
  private async imageFromEvents(events: AsyncGenerator<ServerSentEvent>, job: ImageJob, partials: number): Promise<GeneratedImage> {
    let shown = 0;
    for await (const sse of events) {
      const event = parseImageStreamEvent(sse);
      if (event.kind === "partial") {
        const partial = shown < partials ? upstreamPartial(event.b64) : null;
        if (partial) reportProgress(job, { fraction: ++shown / (partials + 1), partial });
      } else if (event.kind === "completed") {
        return withUsage(checkUpstreamImage(decodeBase64Image(event.b64), job.prompt), event.usage);
      } else if (event.kind === "error") {
        const message = this.redactor.message(event.message, MAX_UPSTREAM_MESSAGE_CHARS);
        throw new AttemptFailure(event.refused ? "rejected" : "failed", event.refused ? message : `the upstream stream failed: ${message}`);
      }
    }
    throw new AttemptFailure("failed", "the upstream stream ended without a completed image");
  }

  private async imageFromAnswer(answer: unknown, ctx: AttemptContext, prompt: string): Promise<GeneratedImage> {
    const { image, revisedPrompt, usage } = parseImageAnswer(answer);
    const revised = revisedPrompt === undefined ? prompt : this.redactor.answer(revisedPrompt);
    const bytes = "b64" in image ? decodeBase64Image(image.b64) : await this.transport.download(ctx, image.url);
    return withUsage(checkUpstreamImage(bytes, revised), usage);
  }
}

/** The image with the upstream's usage, when it reported one (the client's answer passes it on). */
function withUsage(image: GeneratedImage, usage: ImageUsage | undefined): GeneratedImage {
  if (usage) image.usage = usage;
  return image;
}
