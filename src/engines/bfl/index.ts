/**
 * The `bfl` upstream kind: Black Forest Labs' FLUX API (docs.bfl.ai, "Quick start" and
 * "Integration guidelines": submit, poll polling_url, download result.sample).
 *
 * - submit: POST {base_url}/v1/{upstream_model} (base_url https://api.bfl.ai; e.g.
 *   flux-pro-1.1, flux-kontext-pro, flux-pro-1.0-fill) with `x-key: <api_key>` → id, polling_url;
 * - poll: GET polling_url (with x-key; it may be a regional host such as api.eu1.bfl.ai) →
 *   status Pending … Ready; "Request Moderated" / "Content Moderated" refuse the request,
 *   "Error" / "Failed" / "Task not found" fail the attempt;
 * - result: `result.sample`, a signed URL valid for 10 minutes, downloaded at once;
 * - no cancel endpoint: an abandoned job runs out on BFL's side.
 *
 * Our job as input: params pass through; prompt; size → width/height, or aspect_ratio for
 * Kontext models (which take no width/height); reference images as base64 in input_image,
 * input_image_2 … input_image_8; a mask only on fill models (`image` + `mask`, white =
 * repaint), any other model refuses a mask before the charge.
 */
import type { ImageJob } from "../../core/engine";
import { toBase64 } from "../../core/bytes";
import { objectAnswer, stringField, type QueueHandle, type QueueOutcome, type QueueTranslator, type SubmitRequest } from "../queue";
import { aspectRatio, passThrough, whiteMaskBase64 } from "../queue/inputs";

const MAX_REFERENCES = 8;
const REFUSED = new Set(["Request Moderated", "Content Moderated"]);
const FAILED = new Set(["Error", "Failed", "Task not found"]);

function isFill(model: string): boolean {
  return /fill/i.test(model);
}

export class BflTranslator implements QueueTranslator {
  readonly keyScheme = "x-key" as const;
  /** polling_url may name a regional host (api.eu1.bfl.ai, api.us1.bfl.ai): BFL's own. */
  readonly siblingDomain = "bfl.ai";

  inputProblem(job: Omit<ImageJob, "signal">): ReturnType<QueueTranslator["inputProblem"]> {
    const model = job.model.upstreamModel;
    if (isFill(model)) {
      if (job.images.length !== 1) return { image: job.images.length === 0 ? "mask" : 1, message: `the fill model ${model} edits exactly one image` };
      return null;
    }
    if (job.mask) return { image: "mask", message: `the model ${job.model.id} does not take a mask (Black Forest Labs masks only on fill models)` };
    if (job.images.length > MAX_REFERENCES) return { image: MAX_REFERENCES, message: `the model ${job.model.id} takes at most ${MAX_REFERENCES} reference images` };
    return null;
  }

  async submitRequest(job: ImageJob): Promise<SubmitRequest> {
    const model = job.model.upstreamModel;
    const own = new Set(["prompt", "image", "mask", "image_field", ...Array.from({ length: MAX_REFERENCES }, (_, i) => (i === 0 ? "input_image" : `input_image_${i + 1}`))]);
    const body = passThrough(job.model.params, own);
    body.prompt = job.prompt;
    if (job.size) {
      if (/kontext/i.test(model)) body.aspect_ratio = aspectRatio(job.size.width, job.size.height);
      else {
        body.width = job.size.width;
        body.height = job.size.height;
      }
    }
    if (isFill(model)) {
      if (job.images[0]) body.image = toBase64(job.images[0].bytes);
      if (job.mask) body.mask = await whiteMaskBase64(job.mask);
    } else {
      job.images.forEach((img, i) => (body[i === 0 ? "input_image" : `input_image_${i + 1}`] = toBase64(img.bytes)));
    }
    return { path: `/v1/${model.replace(/^\/+/, "")}`, body };
  }

  readSubmitted(answer: unknown): { handle: QueueHandle; outcome: QueueOutcome } {
    const o = objectAnswer(answer, "submit answer");
    return { handle: { id: stringField(o, "id", "submit answer"), statusUrl: stringField(o, "polling_url", "submit answer") }, outcome: { state: "pending" } };
  }

  readStatus(answer: unknown): QueueOutcome {
    const o = objectAnswer(answer, "result");
    const status = typeof o.status === "string" ? o.status : "";
    if (status === "Ready") {
      const result = o.result && typeof o.result === "object" ? (o.result as Record<string, unknown>) : {};
      return typeof result.sample === "string" && result.sample ? { state: "image", url: result.sample } : { state: "failed", message: "the result is Ready without result.sample" };
    }
    if (REFUSED.has(status)) return { state: "refused", message: `Black Forest Labs refused the request: ${status}` };
    if (FAILED.has(status)) return { state: "failed", message: `Black Forest Labs answered ${status}` };
    return { state: "pending" };
  }
}
