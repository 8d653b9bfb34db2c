/**
 * POST /v1/images/generations (JSON) and POST /v1/images/edits (multipart or JSON):
 *   auth → parse (parse.ts: schema, fields, uploaded images) → the core rules
 *   (core/imageRequest.ts) → runImageRequest (core/imageRequests.ts: gate, input decode,
 *   charge, engine, verification, refund) → answer.
 * Failures are thrown and mapped in http/errorMapping.
 */
import { Elysia } from "elysia";
import type { ImageInput, ProgressReport } from "../../../core/engine";
import { checkIdempotencyKey, decideIdempotency, IDEMPOTENCY_TTL_MS, IdempotencyInProgress, requestFingerprint } from "../../../core/idempotency";
import { checkMask } from "../../../core/imageInput";
import { IMAGE_FILES_PATH } from "../../../core/imageLinks";
import { systemResolver } from "../../../core/pinnedFetch";
import { imageJobFrom, type ImageRequestKind } from "../../../core/imageRequest";
import { runImageRequest } from "../../../core/imageRequests";
import { imageResultBody, mimeOfOutputFormat, resultFromStorage, withImageUrl, type ImageResultBody } from "../../../core/imageResult";
import { IdempotencyKeyTaken, type IdempotencyClaim, type TaskRow } from "../../../core/store";
import { TaskNotFound } from "../../../core/taskRunner";
import { MAX_EDIT_IMAGES } from "../../../core/limits";
import type { Services } from "../../../services";
import { apiAuth, assertModelAllowed, type Principal } from "../../auth";
import { acceptApiUploads } from "../../body";
import { metaOf, pathOf } from "../../requestMeta";
import { badRequest } from "../../errors";
import { bearerSecurity, errorResponses, sharedModels } from "../../shared";
import { IMAGE_EDIT_MULTIPART_ENCODING, ImageEditJsonRequest, ImageEditMultipartRequest, ImageGenerationRequest, imageResponseSchema, imageTaskSchema, MultipartTextFields } from "./model";
import { asList, withoutEmptyFiles, editUploads, fileToImage, generationUploads, imagesFromSources, indexedImages, multipartText, releaseUploads, requestFields, validate, type ImageSources } from "./parse";
import { streamImageAnswer, type ImageStreamDeps } from "./stream";
import { isPlainObject, withoutNullFields } from "../../../core/values";

/** The request headers that make an image request idempotent or async (for the OpenAPI document). */
const JOB_HEADERS = [
  {
    name: "Idempotency-Key",
    in: "header" as const,
    required: false,
    description:
      "1 to 255 printable characters, per user, remembered 24 hours: a repeat of the same request gets the first answer again (`Idempotent-Replayed: true`) without a charge; the same key with a different request is 400 `idempotency_key_reused`; while the first still runs, 409 `idempotency_request_in_progress`.",
    schema: { type: "string" as const, minLength: 1, maxLength: 255 },
  },
  {
    name: "Prefer",
    in: "header" as const,
    required: false,
    description: "`respond-async`: answer 202 at once with the task (`Location: /v1/images/tasks/{id}`) and generate in the background. Empty: answer when the image is ready.",
    // An enum, not an example: Swagger UI would fill an example in and make every try async.
    schema: { type: "string" as const, enum: ["respond-async"] },
  },
];

/** `Prefer: respond-async` (RFC 7240), among other preferences. */
function prefersAsync(prefer: string | null): boolean {
  return prefer !== null && prefer.split(",").some((p) => p.split(";")[0]!.trim().toLowerCase() === "respond-async");
}

/** Looks at an Idempotency-Key before a request that keeps losing it answers 409 in progress. */
const IDEMPOTENCY_TURNS = 4;
const ERROR_STATUSES = [400, 401, 402, 403, 404, 409, 413, 415, 429, 500, 502, 503, 504] as const;

export function imagesRoutes(services: Services) {
  const { imageFlow: flow, store, tasks } = services;
  const fetchPolicy: ImageSources = {
    allowPrivateAddresses: services.config.fetch.allow_private,
    timeoutMs: services.config.fetch.timeout_ms,
    resolve: systemResolver,
    async ownLink(url) {
      if (!url.pathname.startsWith(`${IMAGE_FILES_PATH}/`)) return "not ours";
      const link = await services.imageLinks.check(url.pathname.slice(IMAGE_FILES_PATH.length + 1), url.searchParams.get("expires"), url.searchParams.get("signature"));
      // A link that is not intact is someone else's (another server's secret): fetched like any URL.
      if (!link.ok) return link.reason === "expired" ? "gone" : "not ours";
      return (await services.images.open(link.id)) ?? "gone";
    },
  };
  const streaming: ImageStreamDeps = { flow, clock: services.clock, logger: services.logger, heartbeatMs: services.config.server.stream_heartbeat_ms };

  type Job = ReturnType<typeof imageJobFrom> & { images: ImageInput[]; mask?: ImageInput };
  type Answer = { status: 200 | 202; body: unknown; location?: string; queueMs?: number; replayed?: boolean };

  /**
   * `response_format: "url"`: the answer links to the kept image (a signed link from
   * public_url, else the request's own origin) instead of carrying it. An image that could not
   * be kept is delivered inline all the same: the client paid for it.
   */
  async function delivered(body: ImageResultBody, requestBody: unknown, request: Request): Promise<ImageResultBody> {
    if (!isPlainObject(requestBody) || requestBody.response_format !== "url") return body;
    if (body.image_id === undefined) {
      services.logger.warn("response_format url without a kept image: answering b64_json", { request_id: metaOf(request).id });
      return body;
    }
    const { path } = await services.imageLinks.pathFor({ id: body.image_id, mime: mimeOfOutputFormat(body.output_format) });
    return withImageUrl(body, new URL(path, services.config.server.public_url ?? new URL(request.url).origin).href);
  }

  /**
   * One image request, as the client asked for it: synchronous (the default), async
   * (`Prefer: respond-async`: 202 with the task) and/or idempotent (`Idempotency-Key`: a repeat
   * replays the first answer, never charged twice).
   */
  async function answer(kind: ImageRequestKind, principal: Principal, request: Request, job: Job, body: unknown): Promise<Answer> {
    const respondAsync = prefersAsync(request.headers.get("prefer"));
    const webhookUrl = await checkedWebhookUrl(body, respondAsync, principal.userId);
    const key = request.headers.get("idempotency-key");
    if (key === null) return run(kind, principal, request, job, respondAsync, undefined, webhookUrl, body);
    checkIdempotencyKey(key);
    const fingerprint = await requestFingerprint(request.method, pathOf(request), body);
    // Look again after each turn that did not settle it: the request we waited for failed and
    // was refunded (this one may run now), or a duplicate claimed the key between our look and
    // our charge (it holds the key now: replay it). Duplicates that waited on the same failed
    // request all come back at once and all but one lose that race. A few turns at most: a key
    // whose holders keep changing answers 409 in progress, which the openai clients retry.
    for (let turn = 1; ; turn++) {
      const decision = await decideIdempotency(store.tasks, principal.userId, key, fingerprint, services.clock());
      if (decision.kind === "replay") {
        const replayed = await replay(decision.task, key, request, body);
        if (replayed) return replayed;
      } else {
        try {
          return await run(kind, principal, request, job, respondAsync, { key, fingerprint, expiresAt: services.clock() + IDEMPOTENCY_TTL_MS }, webhookUrl, body);
        } catch (e) {
          if (!(e instanceof IdempotencyKeyTaken)) throw e;
        }
      }
      if (turn >= IDEMPOTENCY_TURNS) throw new IdempotencyInProgress(key);
    }
  }

  /**
   * The per-request webhook (async tasks only), checked before anything is charged: a public
   * http(s) URL, and a user with a webhook secret to sign with.
   */
  async function checkedWebhookUrl(body: unknown, respondAsync: boolean, userId: number): Promise<string | undefined> {
    const url = isPlainObject(body) ? body.webhook_url : undefined;
    // Empty is none: what a form (Swagger UI's Try it out) sends for a field left empty.
    if (url === undefined || url === null || url === "") return undefined;
    if (typeof url !== "string") throw badRequest("Invalid 'webhook_url': must be a string.", "webhook_url", "invalid_value");
    if (!respondAsync) {
      throw badRequest("'webhook_url' is for async tasks: send it with the header 'Prefer: respond-async'.", "webhook_url", "webhook_url_requires_async");
    }
    const problem = await services.taskEvents.checkWebhookUrl(url, userId);
    if (problem) throw badRequest(`Invalid 'webhook_url': ${problem}`, "webhook_url", "invalid_webhook_url");
    return url;
  }

  async function run(kind: ImageRequestKind, principal: Principal, request: Request, job: Job, respondAsync: boolean, idempotency?: IdempotencyClaim, webhookUrl?: string, body?: unknown): Promise<Answer> {
    const req = { requestId: metaOf(request).id, userId: principal.userId, keyId: principal.keyId, kind, job };
    // Synchronous and streamed requests give their uploads back when the engine is done (an async
    // task keeps its inputs in the store; these are left to the collector).
    const releaseInputs = () => releaseUploads([...job.images, job.mask]);
    if (respondAsync) {
      const task = await tasks.submit({ request: req, idempotency, webhookUrl });
      return { status: 202, body: await tasks.describe(task), location: `/v1/images/tasks/${task.id}` };
    }
    const endpoint = kind === "edit" ? ("edits" as const) : ("generations" as const);
    // `stream: true` (imageJobFrom sets partialImages exactly then): OpenAI's server-sent events.
    // A stream is a task, so a client that drops it can still read the result.
    const streamed = job.partialImages !== undefined;
    // A keyed task is kept at least as long as its key can replay it, whatever the retention: the
    // store sees to that for every kind of task (tasks.keep_until, written with the charge).
    const taskOptions =
      idempotency || streamed ? { row: { mode: streamed ? ("stream" as const) : ("sync" as const), status: "running" as const, endpoint, model: job.model.id }, idempotency, retentionMs: tasks.retentionMs } : undefined;
    if (streamed) {
      // The task shows the stream's progress too (a page that reattaches polls it).
      const progress = tasks.followProgress(req.requestId);
      const onProgress = (r: ProgressReport) => {
        if (r.fraction !== undefined) progress.report(r.fraction);
        job.onProgress?.(r);
      };
      const tracked = { ...req, job: { ...job, onProgress }, task: taskOptions!, releaseInputs };
      return { status: 200, body: await streamImageAnswer(streaming, tracked, request.signal) };
    }
    const outcome = await runImageRequest(flow, { ...req, releaseInputs, ...(taskOptions ? { task: taskOptions } : {}) }, request.signal);
    // A url answer never needs the base64: its body starts without it.
    const wantsUrl = isPlainObject(body) && body.response_format === "url";
    return { status: 200, body: await delivered(imageResultBody(req.requestId, outcome, job, services.clock(), wantsUrl ? "by_id" : "inline"), body, request), queueMs: outcome.queueMs };
  }

  /**
   * The first request's answer again. A synchronous one still running is waited for (up to the
   * queue timeout, then 409 so the client retries); null when it failed and was refunded.
   */
  async function replay(task: TaskRow, key: string, request: Request, body: unknown): Promise<Answer | null> {
    if (task.mode === "async") return { status: 202, body: await tasks.describe(task), location: `/v1/images/tasks/${task.id}`, replayed: true };
    const until = performance.now() + services.config.limits.queue_timeout_ms;
    let current: TaskRow | null = task;
    while (current && (current.status === "running" || current.status === "queued")) {
      if (performance.now() > until) throw new IdempotencyInProgress(key);
      await Bun.sleep(100);
      current = await store.tasks.get(task.id);
    }
    if (!current || current.status !== "succeeded") return null;
    // The image comes back from the image store; a url request gets a fresh link to it.
    const result = current.result ? await resultFromStorage(current.result, services.images, current.id) : null;
    if (!result) throw new TaskNotFound(task.id, true);
    return { status: 200, body: await delivered(result, body, request), replayed: true };
  }

  /** The answer with its headers: the task's Location, the replay mark, the queue time. */
  function respond(a: Answer, set: { status?: number | string; headers: Record<string, string | number> }) {
    set.status = a.status;
    if (a.location) {
      set.headers.location = a.location;
      set.headers["preference-applied"] = "respond-async";
    }
    if (a.replayed) set.headers["idempotent-replayed"] = "true";
    if (a.queueMs !== undefined) set.headers["x-queue-time-ms"] = String(Math.round(a.queueMs));
    const imageId = a.status === 200 && isPlainObject(a.body) ? a.body.image_id : undefined;
    if (typeof imageId === "string") set.headers["x-image-id"] = imageId;
    return a.body;
  }

  async function handle(kind: ImageRequestKind, ctx: { principal: Principal; request: Request; set: { status?: number | string; headers: Record<string, string | number> } }, job: Job, body: unknown) {
    // A 202's body is the task object: Elysia checks each answer against the schema of its status.
    return respond(await answer(kind, ctx.principal, ctx.request, job, body), ctx.set) as ImageResultBody;
  }

  const common = {
    response: { 200: "ImageResponse" as const, 202: "ImageTask" as const, ...errorResponses(...ERROR_STATUSES) },
  };

  return new Elysia({ name: "v1.images", prefix: "/v1" })
    .use(sharedModels)
    .model({ ImageResponse: imageResponseSchema(), ImageTask: imageTaskSchema(), ImageGenerationRequest, ImageEditJsonRequest, ImageEditMultipartRequest })
    .use(apiAuth(services.auth))
    .post(
      "/images/generations",
      async ({ body, principal, request, set }) => {
        const given = withoutNullFields(body) as Record<string, unknown>;
        validate(ImageGenerationRequest, given);
        const fields = imageJobFrom(services.catalog, requestFields(given));
        assertModelAllowed(principal, fields.model.id);
        const b = given as { reference_image?: string; reference_images?: string[] };
        if (b.reference_image !== undefined && b.reference_images !== undefined) {
          throw badRequest("Send either 'reference_image' (one) or 'reference_images' (a list), not both.", "reference_image", "invalid_value");
        }
        const images = await imagesFromSources(
          b.reference_image !== undefined
            ? [{ value: b.reference_image, param: "reference_image" }]
            : (b.reference_images ?? []).map((u, i) => ({ value: u, param: `reference_images[${i}]` })),
          fetchPolicy,
        );
        return handle("generate", { principal, request, set }, { ...fields, images }, body);
      },
      {
        parse: acceptApiUploads(services.auth, generationUploads, "json"),
        ...common,
        detail: {
          tags: ["Images"],
          summary: "Create an image",
          description:
            "Generates one image from a prompt, optionally guided by reference images. Costs the model's price (`x_atelier_price`, 1 credit by default) when accepted; refunded automatically if generation fails. " +
            "The balance is checked before queueing (402 below the price); over a concurrency limit the answer is 429 `concurrency_limit_exceeded` and nothing is charged. " +
            "The `x-queue-time-ms` response header reports the time spent waiting for a slot.",
          security: bearerSecurity,
          operationId: "createImage",
          parameters: JOB_HEADERS,
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
        const received = (body ?? {}) as Record<string, unknown>;
        const form = isMultipart ? withoutEmptyFiles(received) : received;
        let fields: ReturnType<typeof imageJobFrom>;
        let images: ImageInput[];
        let mask: ImageInput | undefined;
        if (isMultipart) {
          const text = multipartText(form);
          validate(MultipartTextFields, text);
          fields = imageJobFrom(services.catalog, requestFields(text));
          assertModelAllowed(principal, fields.model.id);
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
          assertModelAllowed(principal, fields.model.id);
          const b = given as { images: { image_url: string }[]; mask?: { image_url: string } };
          const sources = b.images.map((img, i) => ({ value: img.image_url, param: `images[${i}]` }));
          if (b.mask !== undefined) sources.push({ value: b.mask.image_url, param: "mask" });
          images = await imagesFromSources(sources, fetchPolicy);
          if (b.mask !== undefined) mask = images.pop();
        }
        if (mask) checkMask(mask, images[0]!);
        return handle("edit", { principal, request, set }, { ...fields, images, mask }, form);
      },
      {
        parse: acceptApiUploads(services.auth, editUploads, "multipart", "json"),
        ...common,
        detail: {
          tags: ["Images"],
          summary: "Edit an image",
          description:
            "Edits an image (or combines several) following a prompt; with a mask, only the mask's transparent area is repainted. " +
            "Send multipart/form-data as the openai clients do (`image`, repeated `image[]`, `mask`), or JSON with `images: [{image_url}]`. " +
            "Costs the model's price (`x_atelier_price`, 1 credit by default) when accepted; refunded automatically if the edit fails.",
          security: bearerSecurity,
          operationId: "editImage",
          parameters: JOB_HEADERS,
          requestBody: {
            required: true,
            content: {
              "multipart/form-data": { schema: { $ref: "#/components/schemas/ImageEditMultipartRequest" }, encoding: IMAGE_EDIT_MULTIPART_ENCODING },
              "application/json": { schema: { $ref: "#/components/schemas/ImageEditJsonRequest" } },
            },
          },
        },
      },
    );
}
