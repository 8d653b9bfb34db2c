/**
 * POST /v1/chat/completions: OpenAI's non-streaming chat completion, free of charge.
 *
 * validate (schema, then the core rules) → resolve the model → admit (chat gate) → engine →
 * record in the request history → answer. No credit check and no ledger row: chat works at a
 * zero balance. Chat has its own gate, separate from the image gate: [limits] chat_concurrency
 * requests run at once server-wide and there is no wait queue (queueSize 0), so an excess
 * request gets 429 at once with retry-after; the openai clients retry those by themselves,
 * and a chat reply is short enough that queueing would only hide the overload.
 */
import { Elysia, t, type TSchema } from "elysia";
import type { Services } from "../../app";
import { chatParamsFrom, CHAT_LIMITS, findChatRuleViolation } from "../../core/chatRequest";
import { GateRejected, LocalGate, type Permit } from "../../core/gate";
import { newId } from "../../core/ids";
import type { CatalogModel } from "../../core/models";
import { EngineError, EngineTimeout, UpstreamUnavailable, type ChatEngine, type ChatJob, type ChatResult } from "../../engines/types";
import { apiAuth } from "../auth";
import { acceptApiBody } from "../body";
import { retryWhileBusy } from "../../store/busy";
import { apiErrorFromEngine } from "../engineErrors";
import { ApiError, badRequest, modelNotFound, tooManyRequests } from "../errors";
import { bearerSecurity, errorResponses, sharedModels } from "../shared";

/** An optional field that also accepts null (OpenAI's clients send null for "not set"). */
function nullable<T extends TSchema>(schema: T, description: string, error: string, examples?: unknown[]) {
  return t.Optional(t.Union([schema, t.Null()], { description, error, ...(examples ? { examples } : {}) }));
}

/**
 * A strict integer. Not t.Integer: Elysia's version also accepts numeric strings ("5"), which
 * OpenAI's API (and so every client written for it) treats as a type error.
 */
function integer(options: { minimum?: number; description?: string } = {}) {
  return t.Number({ ...options, multipleOf: 1 });
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

const ChatCompletionRequest = t.Object(
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
    max_tokens: nullable(integer({ minimum: 1 }), "Most tokens to generate (legacy name of max_completion_tokens).", "must be an integer of at least 1"),
    max_completion_tokens: nullable(integer({ minimum: 1 }), "Most tokens to generate; the reply ends with finish_reason `length` when reached.", "must be an integer of at least 1", [256]),
    stop: nullable(
      t.Union([t.String(), t.Array(t.String(), { maxItems: CHAT_LIMITS.maxStopSequences })]),
      `Up to ${CHAT_LIMITS.maxStopSequences} sequences where the reply stops.`,
      `must be a string or an array of at most ${CHAT_LIMITS.maxStopSequences} strings`,
    ),
    presence_penalty: nullable(t.Number({ minimum: -2, maximum: 2 }), "-2 to 2.", "must be a number from -2 to 2"),
    frequency_penalty: nullable(t.Number({ minimum: -2, maximum: 2 }), "-2 to 2.", "must be a number from -2 to 2"),
    seed: nullable(integer(), "Seed for best-effort deterministic sampling.", "must be an integer"),
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

const ChatCompletion = t.Object(
  {
    id: t.String({ description: "Unique id of this completion; also the id in the request history.", examples: ["chatcmpl-4fQ8sJ2kLm9XbT1vYc0pRz7a"] }),
    object: t.Literal("chat.completion"),
    created: integer({ description: "Unix seconds when the request was received." }),
    model: t.String({ description: "The model id as sent (our public id).", examples: ["builtin-chat"] }),
    choices: t.Array(
      t.Object({
        index: integer({ description: "Always 0: one choice per request." }),
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
      prompt_tokens: integer({ minimum: 0 }),
      completion_tokens: integer({ minimum: 0 }),
      total_tokens: integer({ minimum: 0 }),
    }, { description: "Token counts as reported by the engine (builtin-chat estimates them)." }),
  },
  { description: "A chat completion in OpenAI's shape." },
);

/** OpenAI's clients may send null for "not set": treat a top-level null like an absent field. */
function dropNullFields({ body }: { body: unknown }): void {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return;
  const fields = body as Record<string, unknown>;
  for (const k of Object.keys(fields)) if (fields[k] === null) delete fields[k];
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Elysia's validator coerces a body string into an array or object before checking it ("hi"
 * becomes ["h", "i"], a lone message object becomes a one-item list), so a container of the
 * wrong type was reported deep inside the coerced value ('messages[0].role'). Checked here,
 * before validation, so the error names the field the client got wrong.
 */
function checkContainers(fields: Record<string, unknown>): void {
  const { messages, response_format: format } = fields;
  // Absent (or null) required fields: said plainly, with OpenAI's code for them.
  if (fields.model === undefined) {
    throw badRequest("Missing 'model': this field is required; send a chat model id from GET /v1/models.", "model", "missing_required_parameter");
  }
  if (messages === undefined) {
    throw badRequest(`Missing 'messages': this field is required; send ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages, each {"role", "content"}.`, "messages", "missing_required_parameter");
  }
  if (!Array.isArray(messages)) {
    throw badRequest(`Invalid 'messages': must be an array of ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages, each {"role", "content"}.`, "messages", "invalid_value");
  }
  const bad = messages.findIndex((m) => !isPlainObject(m));
  if (bad >= 0) throw badRequest(`Invalid 'messages[${bad}]': each message must be an object {"role", "content"}.`, `messages[${bad}]`, "invalid_value");
  if (format !== undefined) {
    if (!isPlainObject(format)) {
      throw badRequest(`Invalid 'response_format': must be an object such as {"type": "json_object"}.`, "response_format", "invalid_value");
    }
    if (format.json_schema !== undefined && format.json_schema !== null && !isPlainObject(format.json_schema)) {
      throw badRequest(`Invalid 'response_format.json_schema': must be an object with 'name' and 'schema'.`, "response_format.json_schema", "invalid_value");
    }
    const schema = isPlainObject(format.json_schema) ? format.json_schema.schema : undefined;
    if (schema !== undefined && !isPlainObject(schema)) {
      throw badRequest(`Invalid 'response_format.json_schema.schema': must be a JSON Schema object.`, "response_format.json_schema.schema", "invalid_value");
    }
  }
}

/** The transform hook: nulls dropped, then container types checked (both before validation). */
function normalizeBody(ctx: { body: unknown }): void {
  dropNullFields(ctx);
  if (isPlainObject(ctx.body)) checkContainers(ctx.body);
}

type ChatDeps = Pick<Services, "config" | "store" | "logger" | "clock" | "catalog" | "budget" | "auth" | "background" | "engines">;

/** How much of the last user message the request history keeps. */
const HISTORY_PROMPT_CHARS = 500;

function notAChatModel(model: CatalogModel, chatModels: string[]): ApiError {
  const hint = chatModels.length ? ` Chat models: ${chatModels.slice(0, 5).join(", ")}.` : " This server offers no chat model.";
  return badRequest(`The model '${model.id}' is an ${model.kind} model; /v1/chat/completions needs a chat model.${hint}`, "model", "model_not_chat");
}

/** Runs the engine with the server's deadline; the permit is released when the engine really stops. */
async function runEngine(engine: ChatEngine, job: Omit<ChatJob, "signal">, clientSignal: AbortSignal, deadlineMs: number, deps: ChatDeps, permit: Permit): Promise<ChatResult> {
  const deadline = new AbortController();
  const work = engine.chat({ ...job, signal: AbortSignal.any([clientSignal, deadline.signal]) });
  // An engine that ignores the abort keeps its permit until it stops, so the limit stays true;
  // graceful shutdown waits for it too.
  deps.background.track(work.finally(() => permit.release())).catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      deadline.abort();
      reject(new EngineTimeout(`no reply within ${deadlineMs} ms`));
    }, deadlineMs);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function chatRoutes(deps: ChatDeps) {
  const { catalog, engines, store, clock, logger, config } = deps;
  const gate = new LocalGate({
    global: config.limits.chat_concurrency,
    perUser: config.limits.chat_concurrency,
    queueSize: 0,
    queueTimeoutMs: 0,
  });

  /**
   * The answer never waits for or depends on the history row: it is written in the background,
   * retried while another process holds the database's write lock.
   */
  function record(row: Parameters<typeof store.requests.recordChat>[0]): void {
    const at = clock();
    deps.background
      .track(retryWhileBusy(() => store.requests.recordChat(row, at), { maxWaitMs: Infinity }))
      .catch((e) => logger.error("could not record chat request", { request_id: row.id, error: String(e) }));
  }

  return new Elysia({ name: "v1.chat", prefix: "/v1" })
    .use(sharedModels)
    .model({ ChatCompletionRequest, ChatCompletion })
    .use(apiAuth(deps.auth))
    .post(
      "/chat/completions",
      async ({ body, principal, request }) => {
        const violation = findChatRuleViolation(body);
        if (violation) throw badRequest(violation.message, violation.param, violation.code);
        const model = catalog.get(body.model);
        if (!model) throw modelNotFound(body.model);
        if (model.kind !== "chat") throw notAChatModel(model, catalog.list().filter((m) => m.kind === "chat").map((m) => m.id));

        const id = newId("chatcmpl-");
        const created = Math.floor(clock() / 1000);
        const lastUser = body.messages[body.messages.length - 1]!.content;
        const base = { id, userId: principal.userId, keyId: principal.keyId, model: model.id, prompt: [...lastUser].slice(0, HISTORY_PROMPT_CHARS).join("") };
        const startedAt = performance.now();

        const fail = (e: unknown): never => {
          const mapped = apiErrorFromEngine(e);
          const trace = e instanceof EngineError ? e.trace : undefined;
          // An engine stopped by the client's disconnect is not a server fault (nobody reads the answer).
          const clientGone = !mapped && request.signal.aborted;
          record({
            ...base,
            ...trace,
            status: "failed",
            generationMs: Math.round(performance.now() - startedAt),
            errorCode: mapped?.errorCode ?? (clientGone ? "client_disconnected" : "internal_error"),
            // Unexpected errors stay in the server log; the history shows users nothing internal.
            errorMessage: mapped?.message ?? (clientGone ? "the client closed the connection" : "internal error"),
          });
          if (clientGone) throw new ApiError(499, "invalid_request_error", "The client closed the connection.", null, "client_disconnected");
          throw mapped ?? e;
        };

        const engine = engines.chatEngine(model);
        if (!engine) return fail(new UpstreamUnavailable(`no chat engine is registered for upstream '${model.upstream}'`));

        let permit: Permit;
        try {
          permit = await gate.admit(principal.userId, request.signal);
        } catch (e) {
          if (!(e instanceof GateRejected)) throw e;
          throw tooManyRequests(
            `Too many chat requests at once: the server-wide limit of ${config.limits.chat_concurrency} concurrent chat completions is reached. Retry shortly.`,
            "concurrency_limit_exceeded",
            e.retryAfterMs,
          );
        }

        let result: ChatResult;
        try {
          result = await runEngine(engine, { model, messages: body.messages, params: chatParamsFrom(body) }, request.signal, config.limits.generation_timeout_ms, deps, permit);
        } catch (e) {
          return fail(e);
        }
        const { promptTokens, completionTokens } = result.usage;
        record({
          ...base,
          ...result.trace,
          status: "succeeded",
          promptTokens,
          completionTokens,
          queueMs: Math.round(permit.waitedMs),
          generationMs: Math.round(performance.now() - startedAt),
        });
        return {
          id,
          object: "chat.completion" as const,
          created,
          model: model.id,
          choices: [{ index: 0, message: { role: "assistant" as const, content: result.content, refusal: null }, logprobs: null, finish_reason: result.finishReason }],
          usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
        };
      },
      {
        // acceptApiBody always answers (a body or an error), so the trailing "json" never runs: it is
        // there because the OpenAPI plugin derives the request content type from named parsers.
        parse: [acceptApiBody(deps.auth, deps.budget, "json"), "json"],
        transform: normalizeBody,
        body: "ChatCompletionRequest",
        response: { 200: "ChatCompletion", ...errorResponses(400, 401, 403, 404, 413, 415, 429, 500, 502, 503, 504) },
        detail: {
          tags: ["Chat"],
          summary: "Create a chat completion",
          description:
            "OpenAI's chat completion, without streaming. Free: no credits are needed or charged; every request is recorded in the " +
            `request history. ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages with string content, at most ` +
            `${CHAT_LIMITS.maxTotalChars} characters in total, the last one from the user. \`stream: true\` answers 400 \`stream_unsupported\`; ` +
            "`n` must be 1. At most [limits] chat_concurrency chat requests run at once; more get 429 `concurrency_limit_exceeded` with retry-after.",
          security: bearerSecurity,
          operationId: "createChatCompletion",
        },
      },
    );
}
