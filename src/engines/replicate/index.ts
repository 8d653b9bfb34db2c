/**
 * The `replicate` upstream kind: Replicate's predictions API (replicate.com/docs/reference/http).
 *
 * - submit: POST {base_url}/v1/models/{owner}/{name}/predictions with `{input}` (the official
 *   model API), or POST /v1/predictions with `{version, input}` when upstream_model is
 *   `owner/name:version` or a bare version id; `Authorization: Bearer <api_key>` and
 *   `Prefer: wait=<n>` (n ≤ 60 s and within the attempt), so a quick model answers at once;
 * - poll: GET urls.get → status starting / processing / succeeded / failed / canceled (a
 *   prediction failed by the model's safety checker, "NSFW content detected", is a refusal);
 * - result: `output` (a URL or a list of URLs; the first), which we download; a prediction
 *   finished within `Prefer: wait` may answer it as a `data:` URI instead (the changelog of
 *   2024-10-09, "Synchronous API"), taken as the image itself within the same size limit;
 * - cancel, when an attempt ends while the prediction still runs: POST urls.cancel; one that
 *   ends during the held submit lets the submit answer in the background, then cancels the
 *   prediction it names (queue/index.ts submitHeldOpen).
 *
 * Our job as input: params pass through; prompt; size → width/height and aspect_ratio (the
 * reduced ratio when Flux names it, else "custom"); reference/edit images as data URIs in
 * `image_input` (a list; params.image_field names another, e.g. input_image, image); the mask
 * → `mask` (white = repaint).
 */
import type { ImageJob } from "../../core/engine";
import { AttemptFailure } from "../pool";
import { objectAnswer, stringField, type QueueHandle, type QueueOutcome, type QueueTranslator, type SubmitRequest } from "../queue";
import { ASPECT_RATIOS, aspectRatio, dataUri, imageField, passThrough, takesList, tooManyImages, whiteMaskDataUri } from "../queue/inputs";

const OWN_FIELDS = new Set(["prompt", "mask", "image_field"]);
const DEFAULT_IMAGE_FIELD = "image_input";
const MAX_WAIT_S = 60;

export class ReplicateTranslator implements QueueTranslator {
  readonly keyScheme = "bearer" as const;

  inputProblem(job: Omit<ImageJob, "signal">): ReturnType<QueueTranslator["inputProblem"]> {
    return tooManyImages(job, imageField(job, DEFAULT_IMAGE_FIELD), "Replicate");
  }

  async submitRequest(job: ImageJob): Promise<SubmitRequest> {
    const input = passThrough(job.model.params, OWN_FIELDS);
    input.prompt = job.prompt;
    if (job.size) {
      const ratio = aspectRatio(job.size.width, job.size.height);
      input.aspect_ratio = ASPECT_RATIOS.has(ratio) ? ratio : "custom";
      input.width = job.size.width;
      input.height = job.size.height;
    }
    if (job.images.length > 0) {
      const field = imageField(job, DEFAULT_IMAGE_FIELD);
      const uris = job.images.map(dataUri);
      input[field] = takesList(field) ? uris : uris[0];
    }
    if (job.mask) input.mask = await whiteMaskDataUri(job.mask);
    const model = job.model.upstreamModel;
    const versioned = /^([^/:\s]+\/[^/:\s]+):([0-9a-f]{16,})$/i.exec(model);
    if (versioned) return { path: "/v1/predictions", body: { version: versioned[2], input } };
    if (/^[0-9a-f]{32,}$/i.test(model)) return { path: "/v1/predictions", body: { version: model, input } };
    const [owner, name] = model.split("/");
    return { path: `/v1/models/${encodeURIComponent(owner ?? "")}/${encodeURIComponent(name ?? "")}/predictions`, body: { input } };
  }

  submitHeaders(remainingMs: number): Record<string, string> {
    const seconds = Math.max(1, Math.min(MAX_WAIT_S, Math.floor(remainingMs / 1000) - 1));
    return { prefer: `wait=${seconds}` };
  }

  readSubmitted(answer: unknown): { handle: QueueHandle; outcome: QueueOutcome } {
    const o = objectAnswer(answer, "prediction");
    const urls = o.urls && typeof o.urls === "object" ? (o.urls as Record<string, unknown>) : {};
    const handle: QueueHandle = {
      id: stringField(o, "id", "prediction"),
      statusUrl: stringField(urls, "get", "prediction's urls"),
      ...(typeof urls.cancel === "string" ? { cancel: { method: "POST" as const, url: urls.cancel } } : {}),
    };
    return { handle, outcome: this.readStatus(o) };
  }

  readStatus(answer: unknown): QueueOutcome {
    const o = objectAnswer(answer, "prediction");
    switch (o.status) {
      case "starting":
      case "processing":
        return { state: "pending" };
      case "succeeded": {
        const url = firstUrl(o.output);
        return url ? { state: "image", url } : { state: "failed", message: "the prediction succeeded without an output URL" };
      }
      case "failed": {
        const error = typeof o.error === "string" && o.error ? o.error : "the prediction failed";
        // A model's safety checker fails the prediction with a message, Replicate's only signal
        // ("NSFW content detected. Try running it again, or try a different prompt.": cog-flux,
        // cog-stable-diffusion): a refusal, not the account's fault, and another account would
        // be billed for the same outcome.
        return NSFW.test(error) ? { state: "refused", message: error } : { state: "failed", message: error };
      }
      case "canceled":
        return { state: "failed", message: "the prediction was canceled" };
      default:
        throw new AttemptFailure("failed", `Replicate answered an unknown status ${JSON.stringify(String(o.status)).slice(0, 40)}`);
    }
  }
}

const NSFW = /\bNSFW\b/i;

function firstUrl(output: unknown): string | undefined {
  if (typeof output === "string" && output.length > 0) return output;
  if (Array.isArray(output)) return firstUrl(output[0]);
  if (output && typeof output === "object" && typeof (output as Record<string, unknown>).url === "string") return (output as { url: string }).url;
  return undefined;
}
