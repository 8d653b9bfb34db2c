/**
 * The `fal` upstream kind: fal.ai's queue API (docs.fal.ai, "Queue": model endpoints / queue).
 *
 * - submit: POST {base_url}/{upstream_model} (base_url https://queue.fal.run; the model is the
 *   app id, e.g. fal-ai/flux/dev) with `Authorization: Key <api_key>` → request_id,
 *   status_url, response_url, cancel_url;
 * - poll: GET status_url → IN_QUEUE / IN_PROGRESS / COMPLETED, fal's only statuses: a job that
 *   failed, was cancelled or was refused is COMPLETED too, and only its result says how;
 * - result: GET response_url → `images[0].url` (or `image.url`), which we download; or the
 *   job's error with its HTTP status (docs.fal.ai/errors, …/model-apis/request-errors): a 422
 *   is a model error, `detail: [{loc, msg, type, url}]`, such as content_policy_violation
 *   ("Retryable: false") or an input the model cannot take, so a refusal (400, no retry, no
 *   failure of the account), as fal's own client reads it (a ValidationError); any other error
 *   status (a runner failure 500, a cancelled request 499) fails the attempt;
 * - cancel, when an attempt ends while fal still holds the job: PUT cancel_url
 *   ({base_url}/{app}/requests/{id}/cancel).
 *
 * Our job as fal input: params pass through; prompt; size → image_size {width, height};
 * reference/edit images as data URIs in `image_url` (one) or `image_urls` (several; the
 * model's params.image_field names another field); the mask → `mask_url` (white = repaint).
 */
import type { ImageJob } from "../../core/engine";
import { AttemptFailure } from "../pool";
import { objectAnswer, stringField, type QueueHandle, type QueueOutcome, type QueueTranslator, type SubmitRequest } from "../queue";
import { dataUri, imageField, passThrough, takesList, tooManyImages, whiteMaskDataUri } from "../queue/inputs";

const OWN_FIELDS = new Set(["prompt", "num_images", "sync_mode", "mask_url", "image_field", "image_url", "image_urls"]);

export class FalTranslator implements QueueTranslator {
  readonly keyScheme = "key" as const;
  readonly resultRejectStatuses = [422];

  inputProblem(job: Omit<ImageJob, "signal">): ReturnType<QueueTranslator["inputProblem"]> {
    return tooManyImages(job, this.field(job), "fal");
  }

  async submitRequest(job: ImageJob): Promise<SubmitRequest> {
    const body = passThrough(job.model.params, OWN_FIELDS);
    body.prompt = job.prompt;
    body.num_images = 1;
    if (job.size) body.image_size = { width: job.size.width, height: job.size.height };
    if (job.images.length > 0) {
      const field = this.field(job);
      const uris = job.images.map(dataUri);
      body[field] = takesList(field) ? uris : uris[0];
    }
    if (job.mask) body.mask_url = await whiteMaskDataUri(job.mask);
    return { path: `/${job.model.upstreamModel.replace(/^\/+/, "")}`, body };
  }

  readSubmitted(answer: unknown): { handle: QueueHandle; outcome: QueueOutcome } {
    const o = objectAnswer(answer, "submit answer");
    const id = stringField(o, "request_id", "submit answer");
    const statusUrl = stringField(o, "status_url", "submit answer");
    const responseUrl = stringField(o, "response_url", "submit answer");
    const cancelUrl = typeof o.cancel_url === "string" ? o.cancel_url : `${responseUrl}/cancel`;
    return { handle: { id, statusUrl, resultUrl: responseUrl, cancel: { method: "PUT", url: cancelUrl } }, outcome: { state: "pending" } };
  }

  readStatus(answer: unknown, handle: QueueHandle): QueueOutcome {
    const o = objectAnswer(answer, "status");
    switch (o.status) {
      case "IN_QUEUE":
      case "IN_PROGRESS":
        return { state: "pending" };
      case "COMPLETED":
        // Done, well or not: the result fetch's status says which (a refusal is a 422 there).
        return { state: "result", url: typeof o.response_url === "string" ? o.response_url : handle.resultUrl! };
      default:
        throw new AttemptFailure("failed", `fal answered an unknown status ${JSON.stringify(String(o.status)).slice(0, 40)}`);
    }
  }

  readResult(answer: unknown): QueueOutcome {
    const o = objectAnswer(answer, "result");
    const first = Array.isArray(o.images) ? (o.images[0] as unknown) : o.image;
    const url = first && typeof first === "object" ? (first as Record<string, unknown>).url : undefined;
    if (typeof url === "string" && url.length > 0) return { state: "image", url };
    const detail = typeof o.detail === "string" ? o.detail : "the fal result has no images[0].url";
    return { state: "failed", message: detail };
  }

  private field(job: Pick<ImageJob, "model" | "images">): string {
    return imageField(job, job.images.length > 1 ? "image_urls" : "image_url");
  }
}
