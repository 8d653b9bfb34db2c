/**
 * The `gemini` upstream kind: Google's Gemini API image models ("Nano Banana":
 * gemini-2.5-flash-image, gemini-3-pro-image-preview). Each attempt is translate
 * (translate.ts) → send (transport.ts) → read the answer (parse.ts), run by the account pool:
 *
 * - generation and edit alike → POST {base_url}/v1beta/models/{upstream_model}:generateContent
 *   with the prompt and every image (references, or the images to edit) as `inline_data` parts,
 *   `responseModalities` TEXT and IMAGE, and `imageConfig` from our `size`;
 * - the candidate's image part is the image, its text the `revised_prompt` (redacted);
 * - a mask cannot be expressed (Gemini edits by instruction): an edit with one is refused by
 *   inputProblem, a 400 before the charge, never a silently dropped mask;
 * - safety stops are refusals (400 upstream_rejected), an answer without an image a failed attempt;
 * - a 429 rests the account for the delay its body's RetryInfo names (retryInfo.ts).
 *
 * Image models only: there is no chat here (config refuses a chat model naming a gemini upstream).
 */
import type { UpstreamConfig } from "../../config";
import { UpstreamRejected, type GeneratedImage, type ImageEngine, type ImageJob, type InputProblem } from "../../core/engine";
import type { Clock } from "../../core/clock";
import { AccountAuth } from "../credentials";
import type { AccountPool } from "../pool";
import { MAX_UPSTREAM_MESSAGE_CHARS, SecretRedactor } from "../redact";
import { checkUpstreamImage, decodeBase64Image } from "../upstreamHttp";
import { parseGenerateContentAnswer } from "./parse";
import { generateContentBody } from "./translate";
import { GeminiTransport } from "./transport";

export class GeminiEngine implements ImageEngine {
  private readonly transport: GeminiTransport;

  constructor(
    upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    clock: Clock,
    /** Removes configured secrets from what the upstream says; by default this upstream's. */
    private readonly redactor: SecretRedactor = SecretRedactor.forAccounts(upstream.accounts),
  ) {
    this.transport = new GeminiTransport(upstream, new AccountAuth(upstream.accounts, "x-goog-api-key"), redactor, clock);
  }

  inputProblem(job: Omit<ImageJob, "signal">, kind: "generate" | "edit"): InputProblem | null {
    if (kind === "edit" && job.mask) {
      return {
        image: "mask",
        message: `model '${job.model.id}' cannot take a mask: its upstream (Gemini) edits by instruction only; send the edit without a mask and say in the prompt what to change`,
      };
    }
    return null;
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    return this.image(job);
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.image(job);
  }

  private async image(job: ImageJob): Promise<GeneratedImage> {
    // The flows ask inputProblem before the charge; this keeps a direct caller from losing a mask silently.
    const problem = this.inputProblem(job, job.mask ? "edit" : "generate");
    if (problem) throw new UpstreamRejected(problem.message);
    const json = JSON.stringify(generateContentBody(job));
    const { value, trace } = await this.pool.run(async (ctx) => {
      const { b64, text } = parseGenerateContentAnswer(await this.transport.generateContent(ctx, job.model.upstreamModel, json), (text) =>
        this.redactor.message(text, MAX_UPSTREAM_MESSAGE_CHARS),
      );
      return checkUpstreamImage(decodeBase64Image(b64), text === undefined ? job.prompt : this.redactor.answer(text));
    }, job.signal);
    return { ...value, trace };
  }
}
