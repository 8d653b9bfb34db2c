/** The chat completion request and answer as TypeBox schemas (validation and the OpenAPI document). */
import { t, type TSchema } from "elysia";
import { CHAT_LIMITS } from "../../../core/chatRequest";
import { Integer } from "../../shared";

/** An optional field that also accepts null (OpenAI's clients send null for "not set"). */
function nullable<T extends TSchema>(schema: T, description: string, error: string, examples?: unknown[]) {
  return t.Optional(t.Union([schema, t.Null()], { description, error, ...(examples ? { examples } : {}) }));
}


// Literal unions rather than t.UnionEnum: UnionEnum stamps `default: <first value>` on the
// schema, and the OpenAPI document would then claim that a missing role means "system".
const ROLE_RULE = "each message's role must be 'system', 'user' or 'assistant' (tool and function messages are not supported)";
const CONTENT_RULE = "each message needs a 'content' string; arrays of content parts (text, images, audio) are not supported";

const ChatMessageSchema = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("user"), t.Literal("assistant")], { description: "Who wrote the message.", error: ROLE_RULE }),
    content: t.String({ description: "The message text. Content-part arrays are not supported.", error: CONTENT_RULE, examples: ["Rewrite this title: Red kettle 1.7L"] }),
  },
  { description: "One message of the conversation.", error: "each message must be an object {\"role\", \"content\"}" },
);

const ResponseFormatSchema = t.Object(
  {
    type: t.Union([t.Literal("text"), t.Literal("json_object"), t.Literal("json_schema")], {
      description: "`text` (default), `json_object` (any JSON object) or `json_schema` (JSON matching `json_schema.schema`).",
      error: "must be 'text', 'json_object' or 'json_schema'",
    }),
    // Not nullable: a union with null would report errors at `response_format` instead of the field inside.
    json_schema: t.Optional(
      t.Object(
        {
          name: t.String({
            minLength: 1,
            maxLength: 64,
            pattern: "^[a-zA-Z0-9_-]+$",
            description: "A name for the schema: letters, digits, underscores and dashes, at most 64.",
            error: "must be 1 to 64 letters, digits, underscores or dashes",
            examples: ["product_title"],
          }),
          description: t.Optional(t.String({ description: "What the response is for.", error: "must be a string" })),
          schema: t.Optional(
            t.Record(t.String(), t.Unknown(), {
              description: "The JSON Schema the reply must match (required with type `json_schema`).",
              error: "must be a JSON Schema object",
              examples: [{ type: "object", properties: { title: { type: "string" } }, required: ["title"] }],
            }),
          ),
          strict: nullable(t.Boolean(), "Whether the upstream must follow the schema exactly.", "must be a boolean"),
        },
        { description: "Required when `type` is `json_schema`.", error: "must be an object with 'name' and 'schema'" },
      ),
    ),
  },
  { description: "The format of the reply.", error: "must be an object such as {\"type\": \"json_object\"}" },
);

export const ChatCompletionRequest = t.Object(
  {
    model: t.String({ minLength: 1, description: "A chat model id from GET /v1/models.", error: "must be a chat model id (a non-empty string) from GET /v1/models", examples: ["builtin-chat"] }),
    messages: t.Array(ChatMessageSchema, {
      minItems: CHAT_LIMITS.minMessages,
      maxItems: CHAT_LIMITS.maxMessages,
      description:
        `The conversation, ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages, at most ${CHAT_LIMITS.maxTotalChars} characters of content ` +
        "in total; the last message must have role `user`.",
      error: `must be an array of ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages`,
    }),
    stream: nullable(t.Boolean(), "Must be false or absent: streaming is not supported (400 `stream_unsupported`).", "must be a boolean"),
    n: nullable(t.Literal(1), "Number of choices; only 1 is supported.", "must be 1: this service returns exactly one choice per request"),
    temperature: nullable(t.Number({ minimum: 0, maximum: 2 }), "Sampling temperature, 0 to 2.", "must be a number from 0 to 2", [0.7]),
    top_p: nullable(t.Number({ minimum: 0, maximum: 1 }), "Nucleus sampling mass, 0 to 1.", "must be a number from 0 to 1"),
    max_tokens: nullable(Integer({ minimum: 1 }), "Most tokens to generate (legacy name of max_completion_tokens).", "must be an integer of at least 1"),
    max_completion_tokens: nullable(Integer({ minimum: 1 }), "Most tokens to generate; the reply ends with finish_reason `length` when reached.", "must be an integer of at least 1", [256]),
    stop: nullable(
      t.Union([t.String(), t.Array(t.String(), { maxItems: CHAT_LIMITS.maxStopSequences })]),
      `Up to ${CHAT_LIMITS.maxStopSequences} sequences where the reply stops.`,
      `must be a string or an array of at most ${CHAT_LIMITS.maxStopSequences} strings`,
    ),
    presence_penalty: nullable(t.Number({ minimum: -2, maximum: 2 }), "-2 to 2.", "must be a number from -2 to 2"),
    frequency_penalty: nullable(t.Number({ minimum: -2, maximum: 2 }), "-2 to 2.", "must be a number from -2 to 2"),
    seed: nullable(Integer(), "Seed for best-effort deterministic sampling.", "must be an integer"),
    // Not a union with null (that would report errors at `response_format`, not at the field
    // inside); a null is dropped before validation instead (dropNullFields).
    response_format: t.Optional(ResponseFormatSchema),
    user: nullable(t.String(), "Your identifier for the end user, passed to the upstream.", "must be a string"),
  },
  {
    description: "OpenAI's chat completion request. Fields not listed here are accepted and ignored.",
    examples: [{ model: "builtin-chat", messages: [{ role: "system", content: "You write short product titles." }, { role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] }],
  },
);

export const ChatCompletion = t.Object(
  {
    id: t.String({ description: "Unique id of this completion; also the id in the request history.", examples: ["chatcmpl-4fQ8sJ2kLm9XbT1vYc0pRz7a"] }),
    object: t.Literal("chat.completion"),
    created: Integer({ description: "Unix seconds when the request was received." }),
    model: t.String({ description: "The model id as sent (our public id).", examples: ["builtin-chat"] }),
    choices: t.Array(
      t.Object({
        index: Integer({ description: "Always 0: one choice per request." }),
        message: t.Object({
          role: t.Literal("assistant"),
          content: t.String({ description: "The reply text (a JSON document when response_format asked for JSON)." }),
          refusal: t.Null(),
        }),
        logprobs: t.Null(),
        finish_reason: t.Union([t.Literal("stop"), t.Literal("length"), t.Literal("content_filter"), t.Literal("tool_calls")], {
          description: "`stop`: the reply is complete; `length`: max_tokens / max_completion_tokens cut it short.",
        }),
      }),
    ),
    usage: t.Object({
      prompt_tokens: Integer({ minimum: 0 }),
      completion_tokens: Integer({ minimum: 0 }),
      total_tokens: Integer({ minimum: 0 }),
    }, { description: "Token counts as reported by the engine (builtin-chat estimates them)." }),
  },
  { description: "A chat completion in OpenAI's shape." },
);

