/**
 * POST /v1/images/generations (JSON) and POST /v1/images/edits (multipart or JSON): field rules,
 * turning the body into an ImageJob, and mapping the flow's failures to the error shape. The
 * flow itself (credits, gate, engine, refunds) is src/core/imageRequests.ts.
 */
import { Elysia, t, type TSchema } from "elysia";
import { Type } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import type { Services } from "../../services";
import { countChars } from "../../core/chatRequest";
import { newId } from "../../core/ids";
import {
  assertDecodable,
  checkMask,
  checkQuality,
  ImageInputError,
  imageFromBytes,
  imageFromDataUrl,
  MAX_IMAGE_BYTES,
  parseSize,
  QUALITIES,
} from "../../core/imageInput";
import { runImageRequest, type ImageEndpoint, type ImageFlowDeps } from "../../core/imageRequests";
import type { CatalogModel } from "../../core/models";
import type { ImageInput } from "../../core/engine";
import { apiAuth, type Principal } from "../auth";
import { acceptApiBody } from "../body";
import { describeFailure } from "../errorMapping";
import { describeFirstError } from "../validation";
import { badRequest, modelNotFound } from "../errors";
import { bearerSecurity, errorResponses, sharedModels } from "../shared";

export const MAX_REFERENCE_IMAGES = 10;
export const MAX_PROMPT_CHARS = 32000;
export const MAX_EDIT_IMAGES = 16;

/**
 * TypeBox's own integer: Elysia's t.Integer also accepts numeric strings (meant for query
 * coercion), which would let `"n": "1"` through a JSON body and show `type: string` in the docs.
 */
const Integer = Type.Integer;

const TINY_PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

// ---- request fields shared by both endpoints -------------------------------------------------

const literals = <const V extends string[]>(values: V, description: string, example: V[number]) =>
  t.Union(
    values.map((v) => t.Literal(v)),
    { description, examples: [example] },
  );

const commonFields = {
  prompt: t.String({ minLength: 1, maxLength: MAX_PROMPT_CHARS, description: `What to draw (1 to ${MAX_PROMPT_CHARS} characters).`, examples: ["A lighthouse at dusk, watercolor"] }),
  model: t.Optional(t.String({ minLength: 1, description: "Image model id; the server's default image model when absent.", examples: ["builtin-image"] })),
  size: t.Optional(
    t.Union([t.String(), t.Null()], {
      description: "`auto` or `<width>x<height>`. Each model declares what it accepts; builtin-image: any width and height from 64 to 2048.",
      examples: ["1024x1024"],
    }),
  ),
  quality: t.Optional(
    t.Union([literals([...QUALITIES], "Rendering quality; a model may accept only some of these.", "auto"), t.Null()], {
      description: "`auto | low | medium | high | standard | hd`; a model may narrow it.",
      examples: ["auto"],
    }),
  ),
  response_format: t.Optional(
    t.Union([t.Literal("b64_json"), t.Literal("url"), t.Null()], {
      description: "`b64_json` (the default and the only supported value): the image comes back inline as base64. `url` is answered with 400.",
      examples: ["b64_json"],
    }),
  ),
  n: t.Optional(t.Union([Integer(), t.Null()], { description: "Number of images; must be 1 (one image per request) when present.", examples: [1] })),
  stream: t.Optional(t.Boolean({ description: "Must be false or absent: streaming is not supported (400 `stream_unsupported`).", examples: [false] })),
  // OpenAI's other fields: accepted and handed to the engines that use them.
  background: t.Optional(t.String({ description: "Passed to the engine: `transparent | opaque | auto`.", examples: ["auto"] })),
  output_format: t.Optional(t.String({ description: "Passed to the engine: `png | jpeg | webp`.", examples: ["png"] })),
  output_compression: t.Optional(Integer({ minimum: 0, maximum: 100, description: "Passed to the engine: 0-100 for jpeg/webp output.", examples: [90] })),
  moderation: t.Optional(t.String({ description: "Passed to the engine: `low | auto`.", examples: ["auto"] })),
  style: t.Optional(t.String({ description: "Passed to the engine: `vivid | natural`.", examples: ["vivid"] })),
  user: t.Optional(t.String({ description: "Your end-user id; passed to the engine.", examples: ["user-1234"] })),
};

const PASS_THROUGH = ["background", "output_format", "output_compression", "moderation", "style", "user"] as const;

const DataUrl = (description: string) =>
  t.String({ description: `${description} A data URL \`data:image/<png|jpeg|jpg|webp>;base64,<data>\`, at most 10 MiB decoded.`, examples: [TINY_PNG] });

const ImageGenerationRequest = t.Object(
  {
    ...commonFields,
    reference_image: t.Optional(DataUrl("One reference image (not together with `reference_images`).")),
    reference_images: t.Optional(
      t.Array(DataUrl("A reference image."), {
        maxItems: MAX_REFERENCE_IMAGES,
        description: `Up to ${MAX_REFERENCE_IMAGES} reference images (not together with \`reference_image\`).`,
        examples: [[TINY_PNG]],
      }),
    ),
  },
  { description: "Generate one image from a prompt. Unknown fields are ignored; a field set to null counts as absent.", examples: [{ prompt: "A lighthouse at dusk, watercolor", size: "512x512" }] },
);

const ImageUrlObject = (description: string) => t.Object({ image_url: DataUrl(description) }, { description });

const ImageEditJsonRequest = t.Object(
  {
    ...commonFields,
    images: t.Array(ImageUrlObject("An image to edit; the first is the base image."), {
      minItems: 1,
      maxItems: MAX_EDIT_IMAGES,
      description: `1 to ${MAX_EDIT_IMAGES} images; the first is edited, the others guide it.`,
      examples: [[{ image_url: TINY_PNG }]],
    }),
    mask: t.Optional(ImageUrlObject("PNG with an alpha channel, same size as the first image; transparent pixels mark where to repaint.")),
  },
  { description: "Edit an image (JSON form). Unknown fields are ignored; a field set to null counts as absent.", examples: [{ prompt: "Add a red balloon", images: [{ image_url: TINY_PNG }] }] },
);

const Binary = (description: string) => t.String({ format: "binary", description });

/** For the OpenAPI document only: multipart parts are checked by hand (their types are sniffed). */
const ImageEditMultipartRequest = t.Object(
  {
    image: t.Optional(t.Union([Binary("One image file (PNG, JPEG or WebP, at most 10 MiB)."), t.Array(Binary("An image file."))], { description: "The image to edit, or several." })),
    "image[]": t.Optional(t.Array(Binary("An image file."), { maxItems: MAX_EDIT_IMAGES, description: `Several images (what the openai clients send for an array); indexed parts \`image[0]\`, \`image[1]\`… are accepted too. At most ${MAX_EDIT_IMAGES} in all.` })),
    mask: t.Optional(Binary("PNG with an alpha channel, same size as the first image; transparent pixels mark where to repaint.")),
    prompt: commonFields.prompt,
    model: commonFields.model,
    size: t.Optional(t.String({ description: commonFields.size.description, examples: ["1024x1024"] })),
    quality: t.Optional(t.String({ description: commonFields.quality.description, examples: ["auto"] })),
    response_format: t.Optional(t.String({ description: commonFields.response_format.description, examples: ["b64_json"] })),
    n: t.Optional(t.String({ description: "Must be 1 when present.", examples: ["1"] })),
    stream: t.Optional(t.String({ description: "Must be `false` or absent: streaming is not supported (400 `stream_unsupported`).", examples: ["false"] })),
  },
  { description: "Edit an image (multipart form, as the openai clients send it). Part Content-Types are ignored: the bytes are sniffed." },
);

/** The text fields of a multipart edit, validated like JSON after `n` is turned into a number. */
const MultipartTextFields = t.Object({ ...commonFields, output_compression: t.Optional(Integer({ minimum: 0, maximum: 100 })) });

/**
 * Made per app: Elysia's response compilation mutates the schema it validates with (nested
 * objects gain `additionalProperties: false`), which would leak into the OpenAPI document of
 * any later app in the same process if this were a shared constant.
 */
const imageResponseSchema = () => t.Object(
  {
    created: Integer({ description: "Unix seconds when the image was produced.", examples: [1767225600] }),
    generation_time_ms: Integer({ description: "The engine's time in milliseconds (queue wait excluded; see the x-queue-time-ms header).", examples: [840] }),
    data: t.Array(
      t.Object({
        b64_json: t.String({ description: "The image, base64 without a data-URL prefix.", examples: ["iVBORw0KGgo…"] }),
        revised_prompt: t.String({ description: "The prompt the engine used.", examples: ["A lighthouse at dusk, watercolor"] }),
      }),
      { description: "Exactly one image." },
    ),
    size: t.String({ description: "Dimensions of the image produced.", examples: ["1024x1024"] }),
    quality: t.String({ description: "Quality requested.", examples: ["auto"] }),
    output_format: t.Union([t.Literal("png"), t.Literal("jpeg"), t.Literal("webp")], { description: "Encoding of `b64_json`.", examples: ["png"] }),
  },
  { description: "The generated image." },
);

// ---- validation helpers ----------------------------------------------------------------------

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

/** TypeBox check with the same error shape Elysia's validation gets (http/validation). */
function validate(schema: TSchema, body: unknown): void {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw badRequest("The request body must be a JSON object.", null, "invalid_value");
  const value = promptByCharacters(body as Record<string, unknown>);
  if (Value.Check(schema, value)) return;
  throw describeFirstError(Value.Errors(schema, value).First());
}

type CommonFields = {
  prompt: string;
  model?: string;
  size?: string | null;
  quality?: string | null;
  response_format?: string | null;
  n?: number | null;
  stream?: boolean;
} & Partial<Record<(typeof PASS_THROUGH)[number], unknown>>;

function resolveImageModel(services: Services, id: string | undefined): CatalogModel {
  const modelId = id ?? services.catalog.defaultImageModel;
  if (!modelId) throw badRequest("No image model is configured on this server; name one in 'model'.", "model", "model_required");
  const model = services.catalog.get(modelId);
  if (!model) throw modelNotFound(modelId);
  if (model.kind !== "image") throw badRequest(`The model '${modelId}' is a chat model; use an image model such as '${services.catalog.defaultImageModel ?? "builtin-image"}'.`, "model", "model_not_image");
  return model;
}

/**
 * OpenAI's clients send null for "not set" (the openai types allow null for model, n, size,
 * quality, background, output_format…): a top-level null counts as an absent field.
 */
function withoutNulls(body: unknown): unknown {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return body;
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null));
}

/** The rules every image request shares, in the order a client would fix them. */
function commonJobFields(services: Services, body: CommonFields) {
  // Before anything is charged: the openai client would wait for server-sent events and
  // find none, so the user would pay for an image that never arrives.
  if (body.stream === true) {
    throw badRequest("Streaming is not supported: this service returns the image in one JSON response. Omit 'stream' or set it to false.", "stream", "stream_unsupported");
  }
  const model = resolveImageModel(services, body.model);
  if (body.n !== undefined && body.n !== null && body.n !== 1) throw badRequest(`Invalid 'n' ${JSON.stringify(body.n)}: this service returns exactly one image per request; send n = 1 or omit it.`, "n", "invalid_value");
  if (body.response_format === "url") {
    throw badRequest(
      "response_format 'url' is not supported: this server does not host generated images. Omit response_format or send 'b64_json' to get the image inline.",
      "response_format",
      "unsupported_response_format",
    );
  }
  const size = parseSize(body.size, model);
  const quality = checkQuality(body.quality, model);
  const extra: Record<string, unknown> = {};
  for (const k of PASS_THROUGH) if (body[k] !== undefined) extra[k] = body[k];
  return { model, size, quality, prompt: body.prompt, extra };
}

async function fileToImage(value: unknown, param: string): Promise<ImageInput> {
  if (!(value instanceof Blob)) throw new ImageInputError(`'${param}' must be an uploaded file (multipart part with a filename).`, param, "invalid_image");
  // Refuse from the declared part size before reading it into an array.
  if (value.size > MAX_IMAGE_BYTES) throw new ImageInputError(`'${param}' is larger than 10 MiB (${MAX_IMAGE_BYTES} bytes).`, param, "image_too_large");
  return imageFromBytes(new Uint8Array(await value.arrayBuffer()), param);
}

const asList = (v: unknown): unknown[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** `image[0]`, `image[1]`…: how form encoders with indexed arrays (qs, PHP style) send a list. */
const INDEXED_IMAGE = /^image\[(\d{1,3})\]$/;

/** The indexed image parts in index order. */
function indexedImages(form: Record<string, unknown>): unknown[] {
  return Object.keys(form)
    .flatMap((k) => {
      const m = INDEXED_IMAGE.exec(k);
      return m ? [{ index: Number(m[1]), values: asList(form[k]) }] : [];
    })
    .sort((a, b) => a.index - b.index)
    .flatMap((e) => e.values);
}

/** Multipart text parts arrive as strings (or repeated); `n` becomes a number so one schema fits. */
function multipartText(form: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(form)) {
    if (k === "image" || k === "image[]" || k === "mask" || INDEXED_IMAGE.test(k)) continue;
    if (v instanceof Blob) throw badRequest(`'${k}' must be a text field, not a file.`, k, "invalid_value");
    if (Array.isArray(v)) throw badRequest(`'${k}' was sent more than once.`, k, "invalid_value");
    out[k] = v;
  }
  for (const k of ["n", "output_compression"]) {
    if (typeof out[k] === "string" && /^-?\d+$/.test(out[k] as string)) out[k] = Number(out[k]);
  }
  if (out.stream === "true" || out.stream === "false") out.stream = out.stream === "true";
  return out;
}

// ---- routes ----------------------------------------------------------------------------------

const OUTPUT_FORMAT = { "image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp" } as const;

const ERROR_STATUSES = [400, 401, 402, 403, 404, 413, 415, 429, 500, 502, 503, 504] as const;

export function imagesRoutes(services: Services) {
  const flow: ImageFlowDeps = {
    store: services.store,
    gate: services.gates.image,
    engines: services.engines,
    background: services.background,
    logger: services.logger,
    clock: services.clock,
    generationTimeoutMs: services.config.limits.generation_timeout_ms,
    busyWaitMs: services.config.database.busy_wait_ms,
    describeFailure,
  };

  async function run(
    endpoint: ImageEndpoint,
    principal: Principal,
    request: Request,
    set: { headers: Record<string, string | number> },
    job: ReturnType<typeof commonJobFields> & { images: ImageInput[]; mask?: ImageInput },
    /** The request field of each entry of job.images, in order (for errors). */
    imageParams: string[],
  ) {
    const requestId = newId("img_");
    const paramOf = (i: number | "mask") => (i === "mask" ? "mask" : (imageParams[i] ?? `image[${i}]`));
    const checkInputs = async () => {
      // One at a time: a request with many images does not take the whole decode pool.
      for (const [i, image] of job.images.entries()) await assertDecodable(image, paramOf(i));
      if (job.mask) await assertDecodable(job.mask, "mask");
      const kind = endpoint === "/v1/images/edits" ? "edit" : "generate";
      const problem = services.engines.imageEngine(job.model)?.inputProblem?.(job, kind);
      if (problem) throw new ImageInputError(`'${paramOf(problem.image)}': ${problem.message}.`, paramOf(problem.image), "image_not_supported");
    };
    const outcome = await runImageRequest(
      flow,
      { requestId, userId: principal.userId, keyId: principal.keyId, endpoint, job, checkInputs },
      request.signal,
    );
    set.headers["x-queue-time-ms"] = String(Math.round(outcome.queueMs));
    const { image } = outcome;
    return {
      created: Math.floor(services.clock() / 1000),
      generation_time_ms: outcome.generationMs,
      data: [{ b64_json: Buffer.from(image.bytes).toString("base64"), revised_prompt: image.revisedPrompt ?? job.prompt }],
      size: `${image.width}x${image.height}`,
      quality: job.quality,
      output_format: OUTPUT_FORMAT[image.mime],
    };
  }

  const common = {
    response: { 200: "ImageResponse" as const, ...errorResponses(...ERROR_STATUSES) },
  };

  return new Elysia({ name: "v1.images", prefix: "/v1" })
    .use(sharedModels)
    .model({ ImageResponse: imageResponseSchema(), ImageGenerationRequest, ImageEditJsonRequest, ImageEditMultipartRequest })
    .use(apiAuth(services.auth))
    .post(
      "/images/generations",
      async ({ body, principal, request, set }) => {
        const given = withoutNulls(body);
        validate(ImageGenerationRequest, given);
        const b = given as CommonFields & { reference_image?: string; reference_images?: string[] };
        const fields = commonJobFields(services, b);
        if (b.reference_image !== undefined && b.reference_images !== undefined) {
          throw badRequest("Send either 'reference_image' (one) or 'reference_images' (a list), not both.", "reference_image", "invalid_value");
        }
        const params =
          b.reference_image !== undefined ? ["reference_image"] : (b.reference_images ?? []).map((_, i) => `reference_images[${i}]`);
        const sources = b.reference_image !== undefined ? [b.reference_image] : (b.reference_images ?? []);
        const images = sources.map((u, i) => imageFromDataUrl(u, params[i]!));
        return await run("/v1/images/generations", principal, request, set, { ...fields, images }, params);
      },
      {
        parse: acceptApiBody(services.auth, services.budget, "json"),
        ...common,
        detail: {
          tags: ["Images"],
          summary: "Create an image",
          description:
            "Generates one image from a prompt, optionally guided by reference images. Costs 1 credit when accepted; refunded automatically if generation fails. " +
            "The balance is checked before queueing (402 below 1 credit); over a concurrency limit the answer is 429 `concurrency_limit_exceeded` and nothing is charged. " +
            "The `x-queue-time-ms` response header reports the time spent waiting for a slot.",
          security: bearerSecurity,
          operationId: "createImage",
          requestBody: {
            required: true,
            content: { "application/json": { schema: { $ref: "#/components/schemas/ImageGenerationRequest" } } },
          },
        },
      },
    )
    .post(
      "/images/edits",
      async ({ body, principal, request, set }) => {
        const isMultipart = (request.headers.get("content-type") ?? "").toLowerCase().startsWith("multipart/");
        const form = (body ?? {}) as Record<string, unknown>;
        let fields: ReturnType<typeof commonJobFields>;
        let images: ImageInput[];
        let imageParams: string[];
        let mask: ImageInput | undefined;
        if (isMultipart) {
          const text = multipartText(form);
          validate(MultipartTextFields, text);
          fields = commonJobFields(services, text as CommonFields);
          const indexed = indexedImages(form);
          const single = form.image !== undefined && !Array.isArray(form.image) && form["image[]"] === undefined && indexed.length === 0;
          const files = [...asList(form.image), ...asList(form["image[]"]), ...indexed];
          if (files.length === 0) throw badRequest("Send the image to edit as the multipart file 'image' (or several as 'image[]').", "image", "missing_required_parameter");
          if (files.length > MAX_EDIT_IMAGES) throw badRequest(`At most ${MAX_EDIT_IMAGES} images can be edited together; got ${files.length}.`, "image", "too_many_images");
          images = [];
          imageParams = files.map((_, i) => (single ? "image" : `image[${i}]`));
          for (const [i, f] of files.entries()) images.push(await fileToImage(f, imageParams[i]!));
          if (Array.isArray(form.mask)) throw badRequest("Send at most one 'mask'.", "mask", "invalid_mask");
          if (form.mask !== undefined) mask = await fileToImage(form.mask, "mask");
        } else {
          const given = withoutNulls(form);
          validate(ImageEditJsonRequest, given);
          const b = given as CommonFields & { images: { image_url: string }[]; mask?: { image_url: string } };
          fields = commonJobFields(services, b);
          imageParams = b.images.map((_, i) => `images[${i}]`);
          images = b.images.map((img, i) => imageFromDataUrl(img.image_url, imageParams[i]!));
          if (b.mask !== undefined) mask = imageFromDataUrl(b.mask.image_url, "mask");
        }
        if (mask) checkMask(mask, images[0]!);
        return await run("/v1/images/edits", principal, request, set, { ...fields, images, mask }, imageParams);
      },
      {
        parse: acceptApiBody(services.auth, services.budget, "multipart", "json"),
        ...common,
        detail: {
          tags: ["Images"],
          summary: "Edit an image",
          description:
            "Edits an image (or combines several) following a prompt; with a mask, only the mask's transparent area is repainted. " +
            "Send multipart/form-data as the openai clients do (`image`, repeated `image[]`, `mask`), or JSON with `images: [{image_url}]`. " +
            "Costs 1 credit when accepted; refunded automatically if the edit fails.",
          security: bearerSecurity,
          operationId: "editImage",
          requestBody: {
            required: true,
            content: {
              "multipart/form-data": { schema: { $ref: "#/components/schemas/ImageEditMultipartRequest" } },
              "application/json": { schema: { $ref: "#/components/schemas/ImageEditJsonRequest" } },
            },
          },
        },
      },
    );
}
