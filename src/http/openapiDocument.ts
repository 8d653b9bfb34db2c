/**
 * Final touches on the document @elysiajs/openapi generates, applied to what /openapi.json
 * serves (and therefore to `atelier openapi` and the committed openapi/openapi.json):
 *  - `t.Ref("Model")` inside a model comes out as `{"$ref":"Model"}`, which no resolver can
 *    follow; it becomes `#/components/schemas/Model`.
 *  - component schemas carry TypeBox's `$id` ("#/components/schemas/X"), which JSON Schema
 *    2020-12 would treat as a base URI change; dropped.
 *  - error responses get a description that says when the status happens, instead of the
 *    generator's "Response for status 401".
 *  - the signed image download answers bytes (200, 304) and its own 403/404 reasons: the
 *    generator keeps only the error responses of a route whose 200 is not a schema.
 *  - the image operations' 200 also lists `text/event-stream` (the answer to `stream: true`),
 *    with OpenAI's events as schemas, and their 202 says what it is; so does the chat
 *    operation's 200 (its `chat.completion.chunk`s, when [chat] allow_streaming is on).
 *  - every error response shows the answers that status really has for that operation
 *    (errorExamples), instead of one shared example.
 *  - Elysia's t.Integer (meant for query values that arrive as text) comes out as
 *    `anyOf: [{type: string, format: integer, default: 0}, {type: integer, …}]`: Swagger UI fills
 *    in the 0 (below most minimums) and generators type a string. It is the integer it means.
 */
import { errorExamples, type ErrorExample, type ErrorExampleSettings } from "./errorExamples";
import { ERROR_DESCRIPTIONS } from "./shared";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const isObject = (v: Json | undefined): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

/** The integer branch of Elysia's t.Integer union, or null for any other schema. */
function elysiaInteger(node: JsonObject): JsonObject | null {
  const branches = node.anyOf;
  if (!Array.isArray(branches) || branches.length !== 2) return null;
  const [text, integer] = branches;
  if (!isObject(text) || !isObject(integer) || text.type !== "string" || text.format !== "integer" || integer.type !== "integer") return null;
  const { anyOf: _union, ...rest } = node;
  return { ...rest, ...integer };
}

function fixRefs(node: Json, schemaNames: Set<string>): Json {
  if (Array.isArray(node)) return node.map((n) => fixRefs(n, schemaNames));
  if (!isObject(node)) return node;
  const integer = elysiaInteger(node);
  if (integer) return fixRefs(integer, schemaNames);
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "$ref" && typeof value === "string" && !value.includes("/") && schemaNames.has(value)) {
      out[key] = `#/components/schemas/${value}`;
    } else {
      out[key] = fixRefs(value, schemaNames);
    }
  }
  return out;
}

const HTTP_METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);

export function polishOpenApiDocument(input: unknown, settings: ErrorExampleSettings): JsonObject {
  // A JSON round trip gives an independent plain copy (the plugin caches and reuses its object).
  const doc = JSON.parse(JSON.stringify(input)) as JsonObject;
  const components = isObject(doc.components) ? doc.components : undefined;
  const schemas = components && isObject(components.schemas) ? components.schemas : {};
  for (const schema of Object.values(schemas)) {
    if (isObject(schema)) delete schema.$id;
  }
  const fixed = fixRefs(doc, new Set(Object.keys(schemas))) as JsonObject;

  const paths = isObject(fixed.paths) ? fixed.paths : {};
  for (const item of Object.values(paths)) {
    if (!isObject(item)) continue;
    for (const [method, operation] of Object.entries(item)) {
      if (!HTTP_METHODS.has(method) || !isObject(operation) || !isObject(operation.responses)) continue;
      for (const [status, response] of Object.entries(operation.responses)) {
        if (!isObject(response)) continue;
        const generic = typeof response.description !== "string" || response.description.startsWith("Response for status");
        if (!generic) continue;
        const known = ERROR_DESCRIPTIONS[Number(status)];
        if (known) response.description = known;
        else if (status.startsWith("2")) response.description = "Successful response.";
      }
    }
  }
  describeImageStreams(paths);
  describeChatStream(paths);
  describeImageDownload(paths);
  addErrorExamples(paths, errorExamples(settings));
  return fixed;
}

/** Each JSON error response gets the examples of its status that belong to its path (else the general ones). */
function addErrorExamples(paths: JsonObject, examples: ErrorExample[]): void {
  for (const [path, item] of Object.entries(paths)) {
    if (!isObject(item)) continue;
    for (const [method, operation] of Object.entries(item)) {
      if (!HTTP_METHODS.has(method) || !isObject(operation) || !isObject(operation.responses)) continue;
      for (const [status, response] of Object.entries(operation.responses)) {
        const json = isObject(response) && isObject(response.content) ? response.content["application/json"] : undefined;
        if (!isObject(json) || Number(status) < 400) continue;
        const ofStatus = examples.filter((e) => e.status === Number(status));
        const forPath = ofStatus.filter((e) => e.paths?.test(path));
        const chosen = forPath.length > 0 ? forPath : ofStatus.filter((e) => !e.paths);
        if (chosen.length === 0) continue;
        json.examples = Object.fromEntries(chosen.map((e) => [e.name, { summary: e.summary, value: e.value as unknown as Json }]));
      }
    }
  }
}

/** Image streaming events (OpenAI's convention); `X` is `image_generation` or `image_edit`. */
function streamEventSchemas(prefix: "image_generation" | "image_edit"): JsonObject {
  const common: JsonObject = {
    b64_json: { type: "string", description: "The picture, base64." },
    size: { type: "string" },
    quality: { type: "string" },
    background: { type: "string" },
    output_format: { type: "string", enum: ["png", "jpeg", "webp"] },
    created_at: { type: "integer", description: "Unix seconds." },
  };
  return {
    description:
      `Server-sent events: up to \`partial_images\` \`${prefix}.partial_image\` events, then \`${prefix}.completed\` ` +
      "(or `error`, after which the credit is refunded). A comment line at least every 15 s keeps proxies from closing the stream. Each event's `data` is one of these objects.",
    oneOf: [
      { type: "object", title: `${prefix}.partial_image`, required: ["type", "b64_json", "partial_image_index"], properties: { type: { const: `${prefix}.partial_image` }, partial_image_index: { type: "integer", minimum: 0, maximum: 2 }, ...common } },
      {
        type: "object",
        title: `${prefix}.completed`,
        required: ["type", "b64_json", "id"],
        properties: {
          type: { const: `${prefix}.completed` },
          generation_time_ms: { type: "integer" },
          id: { type: "string", description: "This request's id, as in the JSON answer (the x-request-id header, the history, the ledger)." },
          image_id: { type: "string", description: "The kept image's id, as in the JSON answer." },
          ...common,
        },
      },
      { type: "object", title: "error", required: ["type", "error"], properties: { type: { const: "error" }, error: { $ref: "#/components/schemas/ErrorResponse/properties/error" } } },
    ],
  };
}

function describeImageStreams(paths: JsonObject): void {
  const operations: [string, "image_generation" | "image_edit"][] = [
    ["/v1/images/generations", "image_generation"],
    ["/v1/images/edits", "image_edit"],
  ];
  for (const [path, prefix] of operations) {
    const item = paths[path];
    const post = isObject(item) ? item.post : undefined;
    if (!isObject(post) || !isObject(post.responses)) continue;
    const ok = post.responses["200"];
    if (isObject(ok) && isObject(ok.content)) {
      ok.description = "The image (JSON), or with `stream: true` the server-sent events.";
      ok.content["text/event-stream"] = { schema: streamEventSchemas(prefix) };
    }
    const accepted = post.responses["202"];
    if (isObject(accepted)) {
      accepted.description = "With `Prefer: respond-async`: the task, accepted and charged; `Location` is its URL.";
      accepted.headers = { Location: { description: "/v1/images/tasks/{id}", schema: { type: "string" } } };
    }
  }
}

/** The chat operation's streamed 200: OpenAI's chat.completion.chunk events. */
function describeChatStream(paths: JsonObject): void {
  const item = paths["/v1/chat/completions"];
  const post = isObject(item) ? item.post : undefined;
  const ok = isObject(post) && isObject(post.responses) ? post.responses["200"] : undefined;
  if (!isObject(ok) || !isObject(ok.content)) return;
  const toolCallPiece: JsonObject = {
    type: "object",
    required: ["index"],
    properties: { index: { type: "integer" }, id: { type: "string" }, type: { const: "function" }, function: { type: "object", properties: { name: { type: "string" }, arguments: { type: "string" } } } },
  };
  ok.description = "The chat completion (JSON), or with `stream: true` (when [chat] allow_streaming is on) the server-sent chunks.";
  ok.content["text/event-stream"] = {
    schema: {
      description:
        "Server-sent events of one `data:` line each: `chat.completion.chunk` objects (the first with `delta.role`, then pieces of `delta.content` " +
        "or `delta.tool_calls`, then one with `finish_reason`, then with `stream_options.include_usage` one with `usage` and empty `choices`), " +
        "then the line `data: [DONE]`. A failure after the first chunk is `data: {\"error\": {…}}` and the stream ends without `[DONE]`. " +
        "A comment line at least every 15 s keeps proxies from closing the stream.",
      oneOf: [
        {
          type: "object",
          title: "chat.completion.chunk",
          required: ["id", "object", "created", "model", "choices"],
          properties: {
            id: { type: "string" },
            object: { const: "chat.completion.chunk" },
            created: { type: "integer" },
            model: { type: "string" },
            choices: {
              type: "array",
              items: {
                type: "object",
                properties: {
                  index: { type: "integer" },
                  delta: { type: "object", properties: { role: { const: "assistant" }, content: { type: "string" }, tool_calls: { type: "array", items: toolCallPiece } } },
                  logprobs: { type: "null" },
                  finish_reason: { anyOf: [{ enum: ["stop", "length", "content_filter", "tool_calls"] }, { type: "null" }] },
                },
              },
            },
            usage: { type: "object", properties: { prompt_tokens: { type: "integer" }, completion_tokens: { type: "integer" }, total_tokens: { type: "integer" } } },
          },
        },
        { type: "object", title: "error", required: ["error"], properties: { error: { $ref: "#/components/schemas/ErrorResponse/properties/error" } } },
      ],
    },
  };
}

function describeImageDownload(paths: JsonObject): void {
  const item = paths["/files/images/{file}"];
  const get = isObject(item) ? item.get : undefined;
  if (!isObject(get) || !isObject(get.responses)) return;
  const binary = { schema: { type: "string", format: "binary" } };
  get.responses["200"] = {
    description: "The image bytes.",
    headers: {
      ETag: { description: "The SHA-256 of the bytes, quoted.", schema: { type: "string" } },
      "Cache-Control": { description: "`private, max-age=<seconds left>, immutable`.", schema: { type: "string" } },
      "x-image-id": { description: "The image id.", schema: { type: "string" } },
    },
    content: { "image/png": binary, "image/jpeg": binary, "image/webp": binary },
  };
  get.responses["304"] = { description: "Not modified: If-None-Match named the ETag." };
  const forbidden = get.responses["403"];
  if (isObject(forbidden)) forbidden.description = "The link has expired (`link_expired`) or was altered (`invalid_signature`).";
  const missing = get.responses["404"];
  if (isObject(missing)) missing.description = "The image was deleted by retention or by its owner (`image_not_found`).";
}
