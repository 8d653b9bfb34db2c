/**
 * The `openai` upstream kind: OpenAI itself or anything speaking its API (LocalAI, vLLM,
 * Ollama for chat). Each attempt is translate (translate.ts) → send (transport.ts) → read the
 * answer (parse.ts), run by the upstream's account pool:
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
import type { ChatEngine, ChatJob, ChatResult, GeneratedImage, ImageEngine, ImageJob } from "../../core/engine";
import { AccountAuth } from "../credentials";
import type { AccountPool, AttemptContext } from "../pool";
import { SecretRedactor } from "../redact";
import { checkUpstreamImage, decodeBase64Image } from "../upstreamHttp";
import { parseChatAnswer, parseImageAnswer } from "./parse";
import { chatBody, editForm, imageFields, imageRoute } from "./translate";
import { CHAT_PATH, IMAGE_PATHS, OpenAITransport } from "./transport";
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

  async chat(job: ChatJob): Promise<ChatResult> {
    const json = JSON.stringify(chatBody(job));
    const { value, trace } = await this.pool.run(async (ctx) => {
      const parsed = parseChatAnswer(await this.transport.postJson(ctx, CHAT_PATH, json));
      return { ...parsed, content: this.redactor.answer(parsed.content) };
    }, job.signal);
    return { ...value, trace };
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
    const { value, trace } = await this.pool.run(async (ctx) => {
      const answer =
        route.endpoint === "generations"
          ? await this.transport.postJson(ctx, path, JSON.stringify(fields))
          : await this.transport.postForm(ctx, path, editForm(fields, job.images, job.mask, route.imageField));
      return this.imageFromAnswer(answer, ctx, job.prompt);
    }, job.signal);
    return { ...value, trace };
  }

  private async imageFromAnswer(answer: unknown, ctx: AttemptContext, prompt: string): Promise<GeneratedImage> {
    const { image, revisedPrompt } = parseImageAnswer(answer);
    const revised = revisedPrompt === undefined ? prompt : this.redactor.answer(revisedPrompt);
    const bytes = "b64" in image ? decodeBase64Image(image.b64) : await this.transport.download(ctx, image.url);
    return checkUpstreamImage(bytes, revised);
  }
}
