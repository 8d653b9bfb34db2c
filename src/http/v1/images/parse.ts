/**
 * Image request bodies before the rules: JSON and multipart both become the same checked
 * fields (TypeBox, one error shape with Elysia's validation), and uploaded parts become
 * ImageInputs that carry the request field they came from.
 */
import type { TSchema } from "elysia";
import { Value } from "@sinclair/typebox/value";
import { countChars } from "../../../core/chatRequest";
import type { ImageInput } from "../../../core/engine";
import { fetchImage, isImageUrl, type ImageFetchPolicy } from "../../../core/imageFetch";
import { DecodedDataUrl, ImageInputError, imageFromBytes, imageFromDataUrl, imageFromDecodedDataUrl } from "../../../core/imageInput";
import type { ImageRequestFields } from "../../../core/imageRequest";
import { MAX_IMAGE_BYTES, MAX_PROMPT_CHARS } from "../../../core/limits";
import { badRequest } from "../../errors";
import type { UploadParam } from "../../jsonUploads";
import { describeFirstError } from "../../validation";
import { releaseBytes } from "../../../core/image/release";
import { PASS_THROUGH } from "./model";

/**
 * TypeBox counts maxLength in UTF-16 units; JSON Schema, the OpenAPI document and the issue count
 * characters, so a prompt of 20000 emoji (40000 units) was refused. A prompt within the limit in
 * code points is checked as a placeholder of that many characters instead.
 */
function promptByCharacters(value: Record<string, unknown>): Record<string, unknown> {
  const prompt = value.prompt;
  if (typeof prompt !== "string" || prompt.length <= MAX_PROMPT_CHARS) return value;
  const chars = countChars(prompt);
  return chars <= MAX_PROMPT_CHARS ? { ...value, prompt: "x".repeat(chars) } : value;
}

/** Where /v1/images/generations takes image data URLs (decoded while the body streams in), and their params. */
export const generationUploads: UploadParam = (path) => {
  if (path.length === 1 && path[0] === "reference_image") return "reference_image";
  if (path.length === 2 && path[0] === "reference_images" && typeof path[1] === "number") return `reference_images[${path[1]}]`;
  return null;
};

/** Where the JSON form of /v1/images/edits takes image data URLs, and their params. */
export const editUploads: UploadParam = (path) => {
  if (path.length === 3 && path[0] === "images" && typeof path[1] === "number" && path[2] === "image_url") return `images[${path[1]}]`;
  if (path.length === 2 && path[0] === "mask" && path[1] === "image_url") return "mask";
  return null;
};

/**
 * The schemas describe a data URL as the string the client sent; a decoded one is checked as
 * that string (its content was checked while it was decoded, and is again by imageFromSource).
 */
function uploadsAsStrings(value: unknown): unknown {
  if (value instanceof DecodedDataUrl) return `data:image/${value.subtype};base64,`;
  if (Array.isArray(value)) return value.some((v) => typeof v === "object" && v !== null) ? value.map(uploadsAsStrings) : value;
  if (typeof value === "object" && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, uploadsAsStrings(v)]));
  return value;
}

/** TypeBox check with the same error shape Elysia's validation gets (http/validation). */
export function validate(schema: TSchema, body: unknown): void {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw badRequest("The request body must be a JSON object.", null, "invalid_value");
  const value = promptByCharacters(uploadsAsStrings(body) as Record<string, unknown>);
  if (Value.Check(schema, value)) return;
  throw describeFirstError(Value.Errors(schema, value).First());
}

/** The checked common fields as the core rules take them, OpenAI's other fields in `extra`. */
export function requestFields(body: Record<string, unknown>): ImageRequestFields {
  const extra: Record<string, unknown> = {};
  for (const k of PASS_THROUGH) if (body[k] !== undefined) extra[k] = body[k];
  return {
    prompt: body.prompt as string,
    model: body.model as string | undefined,
    size: body.size as string | null | undefined,
    quality: body.quality as string | null | undefined,
    response_format: body.response_format as string | null | undefined,
    n: body.n as number | null | undefined,
    stream: body.stream as boolean | undefined,
    partial_images: body.partial_images as number | null | undefined,
    extra,
  };
}

/**
 * The multipart form without its empty file parts: a file input left empty is sent as a part
 * with no bytes (by browsers' forms and by Swagger UI's Try it out), which means "no file".
 * Text parts stay as they are: an empty `model` is still a 400, as in JSON.
 */
export function withoutEmptyFiles(form: Record<string, unknown>): Record<string, unknown> {
  const isEmptyFile = (v: unknown) => v instanceof Blob && v.size === 0;
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(form)) {
    if (Array.isArray(value)) {
      const kept = value.filter((v) => !isEmptyFile(v));
      if (kept.length > 0) out[name] = kept;
    } else if (!isEmptyFile(value)) {
      out[name] = value;
    }
  }
  return out;
}

/**
 * The bytes of images read from a request's own body (data URLs decoded as it streamed in,
 * multipart files read into buffers of their own): nothing else holds them, so releaseUploads
 * may give them back once the engine is done. Images fetched from a URL or read from the image
 * store are not in it; they are left to the collector.
 */
const uploadedBytes = new WeakSet<Uint8Array>();

function uploaded(image: ImageInput): ImageInput {
  uploadedBytes.add(image.bytes);
  return image;
}

/** Gives back the memory of those of the images that were read from the request's body (core/image/release). */
export function releaseUploads(images: readonly (ImageInput | undefined)[]): void {
  for (const image of images) if (image && uploadedBytes.delete(image.bytes)) releaseBytes(image.bytes);
}

export async function fileToImage(value: unknown, param: string): Promise<ImageInput> {
  if (!(value instanceof Blob)) throw new ImageInputError(`'${param}' must be an uploaded file (multipart part with a filename).`, param, "invalid_image");
  // Refuse from the declared part size before reading it into an array.
  if (value.size > MAX_IMAGE_BYTES) throw new ImageInputError(`'${param}' is larger than 10 MiB (${MAX_IMAGE_BYTES} bytes).`, param, "image_too_large");
  return uploaded(imageFromBytes(new Uint8Array(await value.arrayBuffer()), param));
}

/**
 * Where image URLs are read from: the network (core/imageFetch), except our own signed links
 * (`/files/images/…` with a valid signature), which are read from the image store directly:
 * no request to ourselves, and no refusal of our own private address.
 */
export interface ImageSources extends ImageFetchPolicy {
  ownLink?: (url: URL) => Promise<{ bytes: Uint8Array } | "not ours" | "gone">;
}

/** A JSON image field: a data URL (decoded) or an http(s) URL (fetched, core/imageFetch). */
export async function imageFromSource(value: unknown, param: string, policy: ImageSources, signal?: AbortSignal): Promise<ImageInput> {
  if (value instanceof DecodedDataUrl) return uploaded(imageFromDecodedDataUrl(value, param));
  if (isImageUrl(value)) {
    const own = policy.ownLink ? await policy.ownLink(new URL(value)) : "not ours";
    if (own === "gone") throw new ImageInputError(`'${param}' is a link to an image of this server that has expired or was deleted.`, param, "image_fetch_failed");
    if (own !== "not ours") return imageFromBytes(own.bytes, param);
    return fetchImage(value, param, policy, signal);
  }
  if (typeof value === "string" && !/^data:/i.test(value.slice(0, 5))) {
    throw new ImageInputError(
      `'${param}' must be a data URL (data:image/<png|jpeg|jpg|webp>;base64,<data>) or an http:// or https:// URL of the image.`,
      param,
      "invalid_image_url",
    );
  }
  return imageFromDataUrl(value, param);
}

/** Image URLs of one request fetched at once. */
const CONCURRENT_IMAGE_FETCHES = 4;

/**
 * Several JSON image fields, in order, fetching at most CONCURRENT_IMAGE_FETCHES URLs at once;
 * the first failure stops the rest and is what the client hears.
 */
export async function imagesFromSources(sources: { value: unknown; param: string }[], policy: ImageSources): Promise<ImageInput[]> {
  const out: ImageInput[] = new Array(sources.length);
  const stop = new AbortController();
  let failure: { error: unknown } | undefined;
  let next = 0;
  async function worker() {
    while (!failure && next < sources.length) {
      const i = next++;
      try {
        out[i] = await imageFromSource(sources[i]!.value, sources[i]!.param, policy, stop.signal);
      } catch (e) {
        failure ??= { error: e };
        stop.abort();
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(CONCURRENT_IMAGE_FETCHES, sources.length) }, worker));
  if (failure) throw failure.error;
  return out;
}

export const asList = (v: unknown): unknown[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** `image[0]`, `image[1]`…: how form encoders with indexed arrays (qs, PHP style) send a list. */
const INDEXED_IMAGE = /^image\[(\d{1,3})\]$/;

/** The indexed image parts in index order. */
export function indexedImages(form: Record<string, unknown>): unknown[] {
  return Object.keys(form)
    .flatMap((k) => {
      const m = INDEXED_IMAGE.exec(k);
      return m ? [{ index: Number(m[1]), values: asList(form[k]) }] : [];
    })
    .sort((a, b) => a.index - b.index)
    .flatMap((e) => e.values);
}

/** Multipart text parts arrive as strings (or repeated); `n` becomes a number so one schema fits. */
export function multipartText(form: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(form)) {
    if (k === "image" || k === "image[]" || k === "mask" || INDEXED_IMAGE.test(k)) continue;
    if (v instanceof Blob) throw badRequest(`'${k}' must be a text field, not a file.`, k, "invalid_value");
    if (Array.isArray(v)) throw badRequest(`'${k}' was sent more than once.`, k, "invalid_value");
    out[k] = v;
  }
  for (const k of ["n", "output_compression", "partial_images"]) {
    if (typeof out[k] === "string" && /^-?\d+$/.test(out[k] as string)) out[k] = Number(out[k]);
  }
  if (out.stream === "true" || out.stream === "false") out.stream = out.stream === "true";
  return out;
}

