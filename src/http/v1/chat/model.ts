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
const ROLE_RULE = "each message's role must be 'system', 'developer', 'user', 'assistant' or 'tool' (function messages are not supported)";
const CONTENT_RULE = "each message's content must be a string or an array of text parts {\"type\": \"text\", \"text\": string}";

const TextPartSchema = t.Object(
  {
    type: t.Literal("text", { description: "Only text parts: image, audio and file parts are refused with 400 `unsupported_content_part`." }),
    text: t.String({ description: "The text of this part." }),
  },
  { description: "One text part of a message's content." },
);

const ToolCallSchema = t.Object(
  {
    id: t.String({ minLength: 1, description: "The call's id; the `tool` message answering it repeats it as `tool_call_id`.", error: "must be the tool call's id (a non-empty string)" }),
    type: t.Literal("function", { error: "must be 'function'" }),
    function: t.Object(
      {
        name: t.String({ minLength: 1, description: "The function called.", error: "must be the function's name" }),
        arguments: t.String({ description: "The arguments as a JSON text, as the model wrote them.", error: "must be a string (the arguments as JSON text)" }),
      },
      { error: "must be an object {\"name\", \"arguments\"}" },
    ),
  },
  { description: "A function call the assistant made.", error: "each tool call must be an object {\"id\", \"type\": \"function\", \"function\"}" },
);

const ChatMessageSchema = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("developer"), t.Literal("user"), t.Literal("assistant"), t.Literal("tool")], {
      description: "Who wrote the message. `developer` is read as `system`; `tool` answers an assistant's tool call.",
      error: ROLE_RULE,
    }),
    content: nullable(
      t.Union([t.String(), t.Array(TextPartSchema, { minItems: 1 })]),
      `The message text: a string, or an array of text parts (joined with a line break). Required, except null on an assistant message with \`tool_calls\`.`,
      CONTENT_RULE,
      ["Rewrite this title: Red kettle 1.7L"],
    ),
    tool_calls: t.Optional(t.Array(ToolCallSchema, { maxItems: CHAT_LIMITS.maxTools, description: "Assistant messages only: the tool calls it made.", error: `must be an array of at most ${CHAT_LIMITS.maxTools} tool calls` })),
    tool_call_id: t.Optional(t.String({ minLength: 1, description: "Tool messages only (and required there): the id of the call this message answers.", error: "must be the id of a tool call (a non-empty string)" })),
  },
  { description: "One message of the conversation.", error: "each message must be an object {\"role\", \"content\"}" },
);

const ToolSchema = t.Object(
  {
    type: t.Literal("function", { description: "Only function tools.", error: "must be 'function'" }),
    function: t.Object(
      {
        name: t.String({
          minLength: 1,
          maxLength: 64,
          pattern: "^[a-zA-Z0-9_-]+$",
          description: "The function's name: letters, digits, underscores and dashes, at most 64.",
          error: "must be 1 to 64 letters, digits, underscores or dashes",
          examples: ["get_weather"],
        }),
        description: t.Optional(t.String({ description: "What the function does, for the model.", error: "must be a string" })),
        parameters: t.Optional(
          t.Record(t.String(), t.Unknown(), {
            description: "The function's arguments as a JSON Schema object.",
            error: "must be a JSON Schema object",
            examples: [{ type: "object", properties: { city: { type: "string" } }, required: ["city"] }],
          }),
        ),
        strict: nullable(t.Boolean(), "Whether the upstream must follow the parameters schema exactly.", "must be a boolean"),
      },
      { error: "must be an object with a 'name'" },
    ),
  },
  { description: "A function the model may call.", error: "each tool must be an object {\"type\": \"function\", \"function\": {\"name\", …}}" },
);

const ToolChoiceSchema = t.Union(
  [
    t.Literal("none"),
    t.Literal("auto"),
    t.Literal("required"),
    t.Object({ type: t.Literal("function"), function: t.Object({ name: t.String({ minLength: 1 }) }) }, { description: "This one function must be called." }),
  ],
  {
    description: "`none`, `auto`, `required`, or {\"type\": \"function\", \"function\": {\"name\"}} naming one of `tools`.",
    error: "must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": …}}",
  },
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
        "(and tool call arguments) in total; the last message must have role `user` or `tool`.",
      error: `must be an array of ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages`,
    }),
    stream: nullable(
      t.Boolean(),
      "`true` answers server-sent `chat.completion.chunk` events when the server's `[chat] allow_streaming` is on; otherwise 400 `stream_unsupported`.",
      "must be a boolean",
    ),
    stream_options: t.Optional(
      t.Object(
        { include_usage: nullable(t.Boolean(), "Streaming: add a last chunk with `usage` (when the engine reports it).", "must be a boolean") },
        { description: "Streaming options.", error: "must be an object such as {\"include_usage\": true}" },
      ),
    ),
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
    // Not a union with null (errors would name `tools`, not the tool at fault); a null is dropped before validation.
    tools: t.Optional(
      t.Array(ToolSchema, {
        maxItems: CHAT_LIMITS.maxTools,
        description: `Up to ${CHAT_LIMITS.maxTools} functions the model may call, passed to OpenAI-compatible upstreams (builtin-chat answers 400 \`tools_unsupported\`).`,
        error: `must be an array of at most ${CHAT_LIMITS.maxTools} function tools`,
      }),
    ),
    tool_choice: t.Optional(ToolChoiceSchema),
    parallel_tool_calls: nullable(t.Boolean(), "Whether the model may call several tools in one reply.", "must be a boolean"),
  },
  {
    description: "OpenAI's chat completion request. Fields not listed here are accepted and ignored.",
    examples: [{ model: "builtin-chat", messages: [{ role: "system", content: "You write short product titles." }, { role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] }],
  },
);

export const ChatCompletion = t.Object(
  {
    id: t.String({ description: "The request id: the same as the x-request-id header, the history row and the log line.", examples: ["req_0Ugh3kQx4fQ8sJ2kLm9XbT1v"] }),
    object: t.Literal("chat.completion"),
    created: Integer({ description: "Unix seconds when the request was received." }),
    model: t.String({ description: "The model id as sent (our public id).", examples: ["builtin-chat"] }),
    choices: t.Array(
      t.Object({
        index: Integer({ description: "Always 0: one choice per request." }),
        message: t.Object({
          role: t.Literal("assistant"),
          content: t.Union([t.String(), t.Null()], { description: "The reply text (a JSON document when response_format asked for JSON); null when the reply is only tool calls or a refusal." }),
          refusal: t.Union([t.String(), t.Null()], {
            description: "Why the model declined to answer, as the upstream said it (e.g. a json_schema it will not fill); null otherwise. The openai clients' `parse()` then leaves `parsed` null.",
          }),
          tool_calls: t.Optional(t.Array(ToolCallSchema, { description: "The functions the model calls (finish_reason `tool_calls`); answer each with a `tool` message." })),
        }),
        logprobs: t.Null(),
        finish_reason: t.Union([t.Literal("stop"), t.Literal("length"), t.Literal("content_filter"), t.Literal("tool_calls")], {
          description: "`stop`: the reply is complete; `length`: max_tokens / max_completion_tokens cut it short; `tool_calls`: the model calls tools.",
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

