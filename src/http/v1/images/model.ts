/** The image requests and answer as TypeBox schemas (validation and the OpenAPI document). */
import { t } from "elysia";
import { Integer } from "../../shared";
import { QUALITIES } from "../../../core/imageInput";
import { MAX_EDIT_IMAGES, MAX_PARTIAL_IMAGES, MAX_PROMPT_CHARS, MAX_REFERENCE_IMAGES } from "../../../core/limits";


const TINY_PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

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
      description:
        "`b64_json` (the default): the image comes back inline as base64. `url`: `data[0].url` is an absolute, signed link to the kept image that works without a key until it expires (`[storage] url_ttl_s`, default 1 hour).",
      examples: ["b64_json"],
    }),
  ),
  n: t.Optional(
    t.Union([t.Literal(1), t.Null()], {
      description: "Number of images: always 1 (this service makes one image per request); may be omitted.",
      examples: [1],
      error: "this service returns exactly one image per request; send n = 1 or omit it",
    }),
  ),
  stream: t.Optional(
    t.Boolean({
      description:
        "`true`: the answer is `text/event-stream` with OpenAI's image streaming events (`image_generation.partial_image` / `image_edit.partial_image`, then `image_generation.completed` / `image_edit.completed` with `generation_time_ms`, or `error` if the generation fails after the charge, refunded). Errors before the charge are the usual JSON answers.",
      examples: [false],
    }),
  ),
  partial_images: t.Optional(
    t.Union([Integer({ minimum: 0, maximum: MAX_PARTIAL_IMAGES }), t.Null()], {
      description: `With \`stream: true\`: how many partial images (0-${MAX_PARTIAL_IMAGES}, default 0) to send before the final one. An engine may send fewer (an upstream that does not stream sends none).`,
      examples: [2],
    }),
  ),
  // OpenAI's other fields: accepted and handed to the engines that use them.
  background: t.Optional(t.String({ description: "Passed to the engine: `transparent | opaque | auto`.", examples: ["auto"] })),
  output_format: t.Optional(t.String({ description: "Passed to the engine: `png | jpeg | webp`.", examples: ["png"] })),
  output_compression: t.Optional(Integer({ minimum: 0, maximum: 100, description: "Passed to the engine: 0-100 for jpeg/webp output.", examples: [90] })),
  moderation: t.Optional(t.String({ description: "Passed to the engine: `low | auto`.", examples: ["auto"] })),
  style: t.Optional(t.String({ description: "Passed to the engine: `vivid | natural`.", examples: ["vivid"] })),
  user: t.Optional(t.String({ description: "Your end-user id; passed to the engine.", examples: ["user-1234"] })),
  webhook_url: t.Optional(
    t.String({
      maxLength: 2048,
      description:
        "Async tasks only (`Prefer: respond-async`): also POST the task's `image.task.*` events here, signed with your webhook secret (Standard Webhooks). Must be a public http(s) URL; refused before the charge otherwise.",
      examples: ["https://example.com/hooks/atelier"],
    }),
  ),
};

export const PASS_THROUGH = ["background", "output_format", "output_compression", "moderation", "style", "user"] as const;

const DataUrl = (description: string) =>
  t.String({
    description:
      `${description} A data URL \`data:image/<png|jpeg|jpg|webp>;base64,<data>\`, or an \`https://\` (or \`http://\`) URL the server fetches: ` +
      "public addresses only (unless the operator allows private ones), at most 3 redirects, within the fetch time limit. " +
      "At most 10 MiB either way, sniffed as PNG, JPEG or WebP; a URL that cannot be fetched is a 400 naming the field, before any charge.",
    examples: [TINY_PNG],
  });

export const ImageGenerationRequest = t.Object(
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

export const ImageEditJsonRequest = t.Object(
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

/**
 * A file part. `contentMediaType` is what OAS 3.1 tools (Swagger UI's file picker) read;
 * `format: binary` is what generators (openapi-typescript with a Blob transform) and OAS 3.0
 * tools read. The bytes are sniffed whatever type the part declares.
 */
const File = (description: string) => t.String({ format: "binary", contentMediaType: "application/octet-stream", description });

/** A text part with a fixed set of values: an `enum` that keeps its description (the generator drops a literal union's). */
const formEnum = <const V extends string[]>(values: V, description: string | undefined, example: V[number]) =>
  t.Unsafe<V[number]>({ type: "string", enum: values, description, examples: [example] });

const IMAGE_PART_TYPES = "image/png, image/jpeg, image/webp";

/** For the OpenAPI document only: multipart parts are checked by hand (their types are sniffed). */
export const ImageEditMultipartRequest = t.Object(
  {
    image: t.Optional(File("The image to edit (PNG, JPEG or WebP, at most 10 MiB). For several, send `image[]` instead.")),
    "image[]": t.Optional(
      t.Array(File("An image file."), {
        maxItems: MAX_EDIT_IMAGES,
        // An empty example: Swagger UI starts the list with no item instead of a text "string" part.
        examples: [[]],
        description: `Several images, the first edited and the others guiding it (what the openai clients send for an array; indexed parts \`image[0]\`, \`image[1]\`… are accepted too). At most ${MAX_EDIT_IMAGES} in all; \`image\` or \`image[]\` is required.`,
      }),
    ),
    mask: t.Optional(File("PNG with an alpha channel, same size as the first image; transparent pixels mark where to repaint.")),
    prompt: commonFields.prompt,
    model: commonFields.model,
    size: t.Optional(t.String({ description: commonFields.size.description, examples: ["1024x1024"] })),
    quality: t.Optional(formEnum([...QUALITIES], commonFields.quality.description, "auto")),
    response_format: t.Optional(formEnum(["b64_json", "url"], commonFields.response_format.description, "b64_json")),
    n: t.Optional(t.Literal(1, { description: "Always 1 when present (one image per request).", examples: [1] })),
    stream: t.Optional(t.Boolean({ description: "`true` for the streamed answer (see the JSON form's `stream`).", examples: [false] })),
    partial_images: t.Optional(Integer({ minimum: 0, maximum: MAX_PARTIAL_IMAGES, description: `With \`stream=true\`: 0-${MAX_PARTIAL_IMAGES} partial images before the final one.`, examples: [2] })),
    // An empty example: Swagger UI sends a form's examples (or the text "string"), and a URL is
    // refused without `Prefer: respond-async`; it leaves an empty field out.
    webhook_url: t.Optional(t.String({ description: "Async tasks only: also POST the task events here (see the JSON form).", examples: [""] })),
  },
  {
    description:
      "Edit an image (multipart form, as the openai clients send it). Numbers and booleans travel as their text (`n=1`, `stream=true`). Part Content-Types are ignored: the bytes are sniffed.",
  },
);

/** The multipart encoding of the edit's file parts (OpenAPI `encoding`): what each part may hold. */
export const IMAGE_EDIT_MULTIPART_ENCODING = {
  image: { contentType: IMAGE_PART_TYPES },
  "image[]": { contentType: IMAGE_PART_TYPES },
  mask: { contentType: "image/png" },
};

/** The text fields of a multipart edit, validated like JSON after `n` is turned into a number. */
export const MultipartTextFields = t.Object({ ...commonFields, output_compression: t.Optional(Integer({ minimum: 0, maximum: 100 })) });

const tokenDetails = (description: string) =>
  t.Object({ text_tokens: Integer({ minimum: 0 }), image_tokens: Integer({ minimum: 0 }) }, { description });

/** OpenAI's image `usage` (openai-node ImagesResponse.Usage), as the upstream reported it. */
const imageUsageSchema = () =>
  t.Object(
    {
      input_tokens: Integer({ minimum: 0, description: "Tokens of the input: the prompt's text and any input images." }),
      output_tokens: Integer({ minimum: 0, description: "Tokens the model generated." }),
      total_tokens: Integer({ minimum: 0 }),
      input_tokens_details: tokenDetails("The input tokens by kind."),
      output_tokens_details: t.Optional(tokenDetails("The output tokens by kind, when the upstream reported them.")),
    },
    {
      description:
        "The upstream's token usage, passed on when it reported one (OpenAI's GPT image models do); absent for engines that count no tokens (builtin-image, Stable Diffusion, …). The streamed completed event carries the same.",
    },
  );

/**
 * Made per app: Elysia's response compilation mutates the schema it validates with (nested
 * objects gain `additionalProperties: false`), which would leak into the OpenAPI document of
 * any later app in the same process if this were a shared constant.
 */
export const imageResponseSchema = () => t.Object(
  {
    id: t.String({
      description:
        "This request's id (an extension of OpenAI's shape that its clients ignore): the same as the `x-request-id` header, the id in the request history and the ledger, and a task's id. A replayed answer (Idempotency-Key) carries the first request's id.",
      examples: ["req_4fQ8sJ2kLm9XbT1vYc0pRz7a"],
    }),
    created: Integer({ description: "Unix seconds when the image was produced.", examples: [1767225600] }),
    generation_time_ms: Integer({ description: "The engine's time in milliseconds (queue wait excluded; see the x-queue-time-ms header).", examples: [840] }),
    data: t.Array(
      t.Object({
        b64_json: t.Optional(t.String({ description: "The image, base64 without a data-URL prefix (`response_format: b64_json`, the default).", examples: ["iVBORw0KGgo…"] })),
        url: t.Optional(
          t.String({
            description:
              "`response_format: url`: an absolute link `/files/images/{image_id}.{ext}?expires=…&signature=…` that works without a key (in a browser or an `<img>`) until `expires` (Unix seconds).",
            examples: ["https://atelier.example.com/files/images/img_4fQ8sJ2kLm9XbT1vYc0pRz7a.png?expires=1767229200&signature=…"],
          }),
        ),
        revised_prompt: t.String({ description: "The prompt the engine used.", examples: ["A lighthouse at dusk, watercolor"] }),
      }),
      { description: "Exactly one image." },
    ),
    size: t.String({ description: "Dimensions of the image produced.", examples: ["1024x1024"] }),
    quality: t.String({ description: "Quality requested.", examples: ["auto"] }),
    output_format: t.Union([t.Literal("png"), t.Literal("jpeg"), t.Literal("webp")], { description: "Encoding of the image.", examples: ["png"] }),
    image_id: t.Optional(
      t.String({
        description:
          "The id of the kept image (an extension of OpenAI's shape that its clients ignore; also the `x-image-id` header). Absent only if the image could not be kept, and then a `url` request gets `b64_json`.",
        examples: ["img_4fQ8sJ2kLm9XbT1vYc0pRz7a"],
      }),
    ),
    usage: t.Optional(imageUsageSchema()),
  },
  { description: "The generated image." },
);


/**
 * The task object (async image requests; also the payload of task webhooks). Made per app like
 * the image response (compiling a response schema mutates it in place).
 */
export const imageTaskSchema = () =>
  t.Object(
    {
      id: t.String({ description: "The task id; also the request id (x-request-id), in the history and the ledger.", examples: ["req_4fQ8sJ2kLm9XbT1vYc0pRz7a"] }),
      object: t.Literal("image.task"),
      status: t.Union([t.Literal("queued"), t.Literal("running"), t.Literal("succeeded"), t.Literal("failed"), t.Literal("canceled")], {
        description: "`queued` → `running` → `succeeded` | `failed`; `canceled` when its owner canceled it. Failed and canceled tasks are refunded.",
      }),
      created_at: Integer({ description: "Unix seconds when the task was accepted (and charged)." }),
      started_at: t.Union([Integer(), t.Null()], { description: "Unix seconds when it started running." }),
      finished_at: t.Union([Integer(), t.Null()], { description: "Unix seconds when it ended." }),
      model: t.String({ examples: ["builtin-image"] }),
      endpoint: t.Union([t.Literal("generations"), t.Literal("edits")]),
      queue_position: t.Optional(Integer({ minimum: 1, description: "While queued: 1 for the next task to start." })),
      progress: t.Optional(t.Number({ minimum: 0, maximum: 1, description: "While running, when the engine reports it." })),
      cancel_requested_at: t.Optional(
        Integer({
          description:
            "Unix seconds when a cancel was asked for while the task ran. Still `running` with it: the server is aborting it (it then ends `canceled`, refunded); `succeeded` with it: its image was finished before the cancel took effect.",
        }),
      ),
      result: t.Optional(
        t.Ref("ImageResponse", {
          description:
            "Once succeeded: exactly the synchronous 200 body. In the list of tasks and in webhook payloads without the image (`data[]` has `revised_prompt` only): `GET /v1/images/tasks/{id}` returns it.",
        }),
      ),
      error: t.Optional(
        t.Object(
          {
            message: t.String(),
            type: t.String(),
            param: t.Union([t.String(), t.Null()]),
            code: t.Union([t.String(), t.Null()]),
          },
          { description: "Once failed or canceled: the OpenAI error object." },
        ),
      ),
    },
    { description: "An image request that runs in the background (Prefer: respond-async)." },
  );

export const imageTaskListSchema = () =>
  t.Object({
    object: t.Literal("list"),
    data: t.Array(t.Ref("ImageTask")),
    has_more: t.Boolean({ description: "Whether older tasks follow; pass the last id as `after` for the next page." }),
  });
