/**
 * POST /v1/images/generations (JSON) and POST /v1/images/edits (multipart or JSON):
 *   auth → parse (parse.ts: schema, fields, uploaded images) → the core rules
 *   (core/imageRequest.ts) → runImageRequest (core/imageRequests.ts: gate, input decode,
 *   charge, engine, verification, refund) → answer.
 * Failures are thrown and mapped in http/errorMapping.
 */
import { Elysia } from "elysia";
import type { ImageInput } from "../../../core/engine";
import { newId } from "../../../core/ids";
import { checkMask, imageFromDataUrl } from "../../../core/imageInput";
import { imageJobFrom, type ImageRequestKind } from "../../../core/imageRequest";
import { runImageRequest, type ImageFlowDeps } from "../../../core/imageRequests";
import { MAX_EDIT_IMAGES } from "../../../core/limits";
import type { Services } from "../../../services";
import { apiAuth, type Principal } from "../../auth";
import { acceptApiBody } from "../../body";
import { describeFailure } from "../../errorMapping";
import { badRequest } from "../../errors";
import { bearerSecurity, errorResponses, sharedModels } from "../../shared";
import { ImageEditJsonRequest, ImageEditMultipartRequest, ImageGenerationRequest, imageResponseSchema, MultipartTextFields } from "./model";
import { asList, fileToImage, indexedImages, multipartText, requestFields, validate } from "./parse";
import { streamImageAnswer, type ImageStreamDeps } from "./stream";
import { withoutNullFields } from "../../../core/values";

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
  const streaming: ImageStreamDeps = { flow, clock: services.clock, logger: services.logger, heartbeatMs: services.config.server.stream_heartbeat_ms };

  async function run(
    kind: ImageRequestKind,
    principal: Principal,
    request: Request,
    set: { headers: Record<string, string | number> },
    job: ReturnType<typeof imageJobFrom> & { images: ImageInput[]; mask?: ImageInput },
  ) {
    const req = { requestId: newId("img_"), userId: principal.userId, keyId: principal.keyId, kind, job };
    // `stream: true` (imageJobFrom sets partialImages exactly then): OpenAI's server-sent events,
    // a Response that Elysia sends as it is (typed away so the route keeps its 200 schema).
    if (job.partialImages !== undefined) return (await streamImageAnswer(streaming, req, request.signal)) as never;
    const outcome = await runImageRequest(flow, req, request.signal);
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
        const given = withoutNullFields(body) as Record<string, unknown>;
        validate(ImageGenerationRequest, given);
        const fields = imageJobFrom(services.catalog, requestFields(given));
        const b = given as { reference_image?: string; reference_images?: string[] };
        if (b.reference_image !== undefined && b.reference_images !== undefined) {
          throw badRequest("Send either 'reference_image' (one) or 'reference_images' (a list), not both.", "reference_image", "invalid_value");
        }
        const images =
          b.reference_image !== undefined
            ? [imageFromDataUrl(b.reference_image, "reference_image")]
            : (b.reference_images ?? []).map((u, i) => imageFromDataUrl(u, `reference_images[${i}]`));
        return await run("generate", principal, request, set, { ...fields, images });
      },
      {
        parse: acceptApiBody(services.auth, "json"),
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
        let fields: ReturnType<typeof imageJobFrom>;
        let images: ImageInput[];
        let mask: ImageInput | undefined;
        if (isMultipart) {
          const text = multipartText(form);
          validate(MultipartTextFields, text);
          fields = imageJobFrom(services.catalog, requestFields(text));
          const indexed = indexedImages(form);
          const single = form.image !== undefined && !Array.isArray(form.image) && form["image[]"] === undefined && indexed.length === 0;
          const files = [...asList(form.image), ...asList(form["image[]"]), ...indexed];
          if (files.length === 0) throw badRequest("Send the image to edit as the multipart file 'image' (or several as 'image[]').", "image", "missing_required_parameter");
          if (files.length > MAX_EDIT_IMAGES) throw badRequest(`At most ${MAX_EDIT_IMAGES} images can be edited together; got ${files.length}.`, "image", "too_many_images");
          images = [];
          for (const [i, f] of files.entries()) images.push(await fileToImage(f, single ? "image" : `image[${i}]`));
          if (Array.isArray(form.mask)) throw badRequest("Send at most one 'mask'.", "mask", "invalid_mask");
          if (form.mask !== undefined) mask = await fileToImage(form.mask, "mask");
        } else {
          const given = withoutNullFields(form) as Record<string, unknown>;
          validate(ImageEditJsonRequest, given);
          fields = imageJobFrom(services.catalog, requestFields(given));
          const b = given as { images: { image_url: string }[]; mask?: { image_url: string } };
          images = b.images.map((img, i) => imageFromDataUrl(img.image_url, `images[${i}]`));
          if (b.mask !== undefined) mask = imageFromDataUrl(b.mask.image_url, "mask");
        }
        if (mask) checkMask(mask, images[0]!);
        return await run("edit", principal, request, set, { ...fields, images, mask });
      },
      {
        parse: acceptApiBody(services.auth, "multipart", "json"),
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
