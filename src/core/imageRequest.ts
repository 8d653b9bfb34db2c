/**
 * The rules of an image request that are the domain's, not the wire's: which model, how many
 * images, streaming, the response format, size and quality. The http layer checks types with
 * its schemas first and hands the fields here; the answer is the job the flow runs.
 */
import { ImageInputError, checkQuality, parseSize } from "./imageInput";
import type { ImageJob } from "./engine";
import type { CatalogModel } from "./models";
import { MAX_PARTIAL_IMAGES } from "./limits";

export type ImageRequestKind = "generate" | "edit";

/** The fields both image endpoints share, as the client sent them (null = not given). */
export interface ImageRequestFields {
  prompt: string;
  model?: string | null;
  size?: string | null;
  quality?: string | null;
  response_format?: string | null;
  n?: number | null;
  stream?: boolean | null;
  /** Streamed requests: how many partial images to send before the final one (0–3). */
  partial_images?: number | null;
  /** OpenAI's other fields, handed to the engines that use them. */
  extra: Record<string, unknown>;
}

/** A model id that names nothing in the catalog (404 model_not_found, not a 400). */
export class ModelNotFoundError extends Error {
  override name = "ModelNotFoundError";
  constructor(readonly model: string) {
    super(`the model '${model}' does not exist`);
  }
}

export interface ModelDirectory {
  get(id: string): CatalogModel | undefined;
  readonly defaultImageModel: string | undefined;
}

export function resolveImageModel(catalog: ModelDirectory, id: string | null | undefined): CatalogModel {
  const modelId = id ?? catalog.defaultImageModel;
  if (!modelId) throw new ImageInputError("No image model is configured on this server; name one in 'model'.", "model", "model_required");
  const model = catalog.get(modelId);
  if (!model) throw new ModelNotFoundError(modelId);
  if (model.kind !== "image") {
    throw new ImageInputError(`The model '${modelId}' is a chat model; use an image model such as '${catalog.defaultImageModel ?? "builtin-image"}'.`, "model", "model_not_image");
  }
  return model;
}

/**
 * The job's fields (images aside), checked in the order a client would fix them. A streamed
 * request (`stream: true`) is the job with `partialImages` set (0 when not given); only then.
 */
export function imageJobFrom(catalog: ModelDirectory, fields: ImageRequestFields): Omit<ImageJob, "signal" | "images" | "mask"> {
  const model = resolveImageModel(catalog, fields.model);
  if (fields.n !== undefined && fields.n !== null && fields.n !== 1) {
    throw new ImageInputError(`Invalid 'n' ${JSON.stringify(fields.n)}: this service returns exactly one image per request; send n = 1 or omit it.`, "n", "invalid_value");
  }
  // "url" answers with a signed link to the kept image (core/imageLinks); the http layer builds it.
  const format = fields.response_format;
  if (format !== undefined && format !== null && format !== "b64_json" && format !== "url") {
    throw new ImageInputError(`Invalid 'response_format' ${JSON.stringify(format)}: send 'b64_json' (the default) or 'url'.`, "response_format", "invalid_value");
  }
  const partialImages = fields.partial_images ?? 0;
  if (fields.stream === true && (!Number.isInteger(partialImages) || partialImages < 0 || partialImages > MAX_PARTIAL_IMAGES)) {
    throw new ImageInputError(`Invalid 'partial_images' ${JSON.stringify(partialImages)}: send an integer from 0 to ${MAX_PARTIAL_IMAGES}.`, "partial_images", "invalid_value");
  }
  const streamed = fields.stream === true ? { partialImages } : {};
  return { model, prompt: fields.prompt, size: parseSize(fields.size, model), quality: checkQuality(fields.quality, model), extra: fields.extra, ...streamed };
}
