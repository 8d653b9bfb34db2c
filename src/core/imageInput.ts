/**
 * Image inputs as clients send them (data URLs, uploaded files) turned into trusted ImageInputs:
 * the size is checked before anything is decoded, base64 is validated strictly, the bytes are
 * sniffed (a declared type is never trusted alone) and the dimensions are read from the header,
 * so later rules (mask dimensions) and engines have them without a full decode.
 * Also: the `size` and `quality` request fields, checked against the model.
 */
import type { CatalogModel } from "./models";
import type { ImageInput, ImageMime, RequestedSize } from "./engine";
import { verifyUploadOffThread } from "./image/codec";
import { readDimensions } from "./image/dimensions";
import { pngHasAlpha } from "./image/png";
import { FREE_SIZE_MAX, FREE_SIZE_MIN, MAX_IMAGE_BYTES } from "./limits";



export const QUALITIES = ["auto", "low", "medium", "high", "standard", "hd"] as const;
export type Quality = (typeof QUALITIES)[number];

/**
 * A client-supplied image or image field is unusable. `param` names the request field
 * (e.g. `reference_images[3]`, `image[1]`, `mask`, `size`). No `code` property on purpose.
 */
export class ImageInputError extends Error {
  override name = "ImageInputError";
  constructor(
    message: string,
    readonly param: string,
    /** Machine-readable reason, used as the API error code. */
    readonly reason: string,
  ) {
    super(message);
  }
}

const DECLARED_TYPES: Record<string, ImageMime> = {
  png: "image/png",
  jpeg: "image/jpeg",
  jpg: "image/jpeg",
  webp: "image/webp",
};

/** A data URL's head, looked for in the first DATA_URL_HEAD_CHARS characters only. */
export const DATA_URL = /^data:image\/([a-z0-9.+-]+);base64,/i;
export const DATA_URL_HEAD_CHARS = 64;

/** Decoded length of canonical padded base64 (length a multiple of 4). */
function decodedLength(b64: string): number {
  const padding = b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0;
  return (b64.length / 4) * 3 - padding;
}

function mib(n: number): string {
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

/**
 * A data URL whose base64 was already decoded while the request body streamed in (http/jsonUploads):
 * the declared subtype (`png` in `data:image/png;base64,`) and the decoded bytes, in a buffer
 * of their own and of exactly their size. Stands where the data URL string stood in the body.
 */
export class DecodedDataUrl {
  constructor(
    readonly subtype: string,
    readonly bytes: Uint8Array,
  ) {}
}

/** The type a data URL declares (its `image/<subtype>`), or the 400 for one we do not take. */
function declaredType(subtype: string, param: string): ImageMime {
  const declared = DECLARED_TYPES[subtype.toLowerCase()];
  if (!declared) throw new ImageInputError(`'${param}' has type image/${subtype}; only PNG, JPEG and WebP images are accepted.`, param, "invalid_image_format");
  return declared;
}

export const tooLargeAfterDecoding = (param: string) =>
  new ImageInputError(`'${param}' is larger than ${mib(MAX_IMAGE_BYTES)} (${MAX_IMAGE_BYTES} bytes) after decoding.`, param, "image_too_large");

export const invalidBase64 = (param: string) =>
  new ImageInputError(`'${param}' does not contain valid base64 data (standard alphabet, padded, no whitespace).`, param, "invalid_base64");

/** A data URL decoded while the body streamed in → a sniffed ImageInput. */
export function imageFromDecodedDataUrl(value: DecodedDataUrl, param: string): ImageInput {
  return imageFromBytes(value.bytes, param, declaredType(value.subtype, param));
}

/**
 * `data:image/<png|jpeg|jpg|webp>;base64,<data>` → a sniffed ImageInput. The size limit is
 * enforced from the base64 length, before a single byte is decoded.
 */
export function imageFromDataUrl(value: unknown, param: string): ImageInput {
  if (value instanceof DecodedDataUrl) return imageFromDecodedDataUrl(value, param);
  if (typeof value !== "string") throw new ImageInputError(`'${param}' must be a data URL string (data:image/png;base64,…).`, param, "invalid_image");
  const head = DATA_URL.exec(value.slice(0, DATA_URL_HEAD_CHARS));
  if (!head) {
    throw new ImageInputError(
      `'${param}' must be a base64 data URL of the form data:image/<png|jpeg|jpg|webp>;base64,<data>.`,
      param,
      "invalid_image_url",
    );
  }
  const declared = declaredType(head[1]!, param);
  const b64 = value.slice(head[0].length);
  // Upper bound first (cheap, and before the validation regex scans a huge string).
  if (Math.floor(b64.length / 4) * 3 > MAX_IMAGE_BYTES + 2) throw tooLargeAfterDecoding(param);
  // The URL-safe alphabet is the one thing Buffer's decoder accepts silently without shortening.
  if (b64.length === 0 || b64.length % 4 !== 0 || b64.includes("-") || b64.includes("_")) throw invalidBase64(param);
  const expected = decodedLength(b64);
  if (expected > MAX_IMAGE_BYTES) throw tooLargeAfterDecoding(param);
  // Buffer skips characters outside the alphabet and stops at an early '=': either makes the
  // output shorter than canonical base64 of this length, which is how strictness is checked
  // here (a regex over 14 MB costs more than the decode itself).
  const bytes: Uint8Array = Buffer.from(b64, "base64");
  if (bytes.byteLength !== expected) throw invalidBase64(param);
  return imageFromBytes(bytes, param, declared);
}

/**
 * Raw bytes (an uploaded file, or decoded data URL) → ImageInput. The bytes' signature decides
 * the type; when the client declared one, the two must agree.
 */
export function imageFromBytes(bytes: Uint8Array, param: string, declared?: ImageMime): ImageInput {
  if (bytes.byteLength > MAX_IMAGE_BYTES) {
    throw new ImageInputError(`'${param}' is larger than ${mib(MAX_IMAGE_BYTES)} (${MAX_IMAGE_BYTES} bytes).`, param, "image_too_large");
  }
  if (bytes.byteLength === 0) throw new ImageInputError(`'${param}' is empty.`, param, "invalid_image");
  const mime = sniffImageMime(bytes);
  if (!mime) throw new ImageInputError(`'${param}' is not a PNG, JPEG or WebP image (its bytes have none of their signatures).`, param, "invalid_image_format");
  if (declared && declared !== mime) {
    throw new ImageInputError(`'${param}' is declared as ${declared} but its bytes are ${mime}.`, param, "image_type_mismatch");
  }
  const dims = readDimensions(bytes, mime);
  if (!dims || dims.width < 1 || dims.height < 1) {
    throw new ImageInputError(`'${param}' looks like ${mime} but its header is truncated or invalid (no dimensions found).`, param, "invalid_image");
  }
  return { bytes, mime, width: dims.width, height: dims.height, param };
}

/**
 * A header can be valid over truncated or damaged data. The structure is walked (every PNG
 * CRC, JPEG markers to EOI, WebP RIFF sizes) and a PNG's image data inflated, bounded by its
 * header, in the decode pool; no pixels are produced (the engine decodes once, as it needs).
 */
export async function assertDecodable(image: ImageInput, param: string): Promise<void> {
  try {
    await verifyUploadOffThread(image.bytes, image.mime);
  } catch (e) {
    throw new ImageInputError(`'${param}' is not a decodable ${image.mime} image: ${(e as Error).message}`, param, "invalid_image");
  }
}

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

function startsWith(bytes: Uint8Array, sig: number[], at = 0): boolean {
  if (bytes.byteLength < at + sig.length) return false;
  return sig.every((b, i) => bytes[at + i] === b);
}

function ascii(bytes: Uint8Array, at: number, len: number): string {
  return bytes.byteLength < at + len ? "" : String.fromCharCode(...bytes.subarray(at, at + len));
}

/** The image type from the magic bytes alone, or null. */
export function sniffImageMime(bytes: Uint8Array): ImageMime | null {
  if (startsWith(bytes, PNG_SIGNATURE)) return "image/png";
  if (startsWith(bytes, [0xff, 0xd8, 0xff])) return "image/jpeg";
  if (ascii(bytes, 0, 4) === "RIFF" && ascii(bytes, 8, 4) === "WEBP") return "image/webp";
  return null;
}


/** The edit mask: a PNG with an alpha channel and the first image's dimensions. */
export function checkMask(mask: ImageInput, first: ImageInput, param = "mask"): void {
  if (mask.mime !== "image/png") throw new ImageInputError(`'${param}' must be a PNG with an alpha channel; got ${mask.mime}.`, param, "invalid_mask");
  if (!pngHasAlpha(mask.bytes)) {
    throw new ImageInputError(`'${param}' must be a PNG with an alpha channel (transparent where the image should change); this PNG has none.`, param, "invalid_mask");
  }
  if (mask.width !== first.width || mask.height !== first.height) {
    throw new ImageInputError(
      `'${param}' is ${mask.width}x${mask.height} but the image is ${first.width}x${first.height}; they must have the same dimensions.`,
      param,
      "invalid_mask",
    );
  }
}

const SIZE = /^([1-9]\d{0,4})x([1-9]\d{0,4})$/;

/**
 * `size` → the requested dimensions, or null for "auto"/absent (the engine picks). A model with a
 * `sizes` list accepts exactly those (and "auto"); otherwise any WxH within FREE_SIZE_MIN..MAX.
 */
export function parseSize(value: string | null | undefined, model: CatalogModel): RequestedSize | null {
  if (value === undefined || value === null || value === "auto") return null;
  const allowed = model.sizes;
  const m = SIZE.exec(value);
  const described = allowed
    ? `one of ${["auto", ...allowed].map((s) => `'${s}'`).join(", ")}`
    : `'auto' or '<width>x<height>' with each side from ${FREE_SIZE_MIN} to ${FREE_SIZE_MAX}`;
  if (!m) throw new ImageInputError(`Invalid 'size' ${JSON.stringify(value)}: model ${model.id} accepts ${described}.`, "size", "invalid_size");
  const size = { width: Number(m[1]), height: Number(m[2]) };
  const ok = allowed
    ? allowed.includes(`${size.width}x${size.height}`)
    : [size.width, size.height].every((n) => n >= FREE_SIZE_MIN && n <= FREE_SIZE_MAX);
  if (!ok) throw new ImageInputError(`Invalid 'size' ${JSON.stringify(value)}: model ${model.id} accepts ${described}.`, "size", "invalid_size");
  return size;
}

/** `quality` (already one of QUALITIES) narrowed by the model's own list; absent → "auto". */
export function checkQuality(value: string | null | undefined, model: CatalogModel): string {
  const q = value ?? "auto";
  const allowed = model.qualities ?? [...QUALITIES];
  if (q !== "auto" && !allowed.includes(q)) {
    throw new ImageInputError(
      `Invalid 'quality' ${JSON.stringify(q)}: model ${model.id} accepts ${["auto", ...allowed.filter((x) => x !== "auto")].map((s) => `'${s}'`).join(", ")}.`,
      "quality",
      "invalid_quality",
    );
  }
  return q;
}
