/**
 * POST /v1/chat/completions: OpenAI's non-streaming chat completion, free of charge.
 *   auth → parse (parse.ts) → validate (model.ts, then the core rules) → resolve the model →
 *   runChatRequest (core/chatRequests.ts: engine, chat gate, deadline, history) → answer.
 * No credit check and no ledger row: chat works at a zero balance. Failures are thrown and
 * mapped in http/errorMapping.
 */
import { Elysia } from "elysia";
import { CHAT_LIMITS, chatMessagesFrom, chatParamsFrom, findChatRuleViolation } from "../../../core/chatRequest";
import type { ChatMessage, ChatResult } from "../../../core/engine";
import type { ClientSignal } from "../../../core/clientSignal";
import { runChatRequest, type ChatFlowDeps, type ChatRequest } from "../../../core/chatRequests";
import type { CatalogModel } from "../../../core/models";
import type { Services } from "../../../services";
import { apiAuthAfterBody, assertModelAllowed } from "../../auth";
import { acceptApiBody } from "../../body";
import { describeFailure } from "../../errorMapping";
import { badRequest, modelNotFound, type ApiError } from "../../errors";
import { metaOf } from "../../requestMeta";
import { bearerSecurity, errorResponses, sharedModels } from "../../shared";
import { ChatCompletion, ChatCompletionRequest } from "./model";
import { normalizeBody } from "./parse";
import { streamChatAnswer, type ChatStreamDeps } from "./stream";

type ChatDeps = Pick<Services, "config" | "store" | "logger" | "clock" | "catalog" | "auth" | "background" | "engines" | "gates">;

/** How much of the last user message the request history keeps. */
const HISTORY_PROMPT_CHARS = 500;

function notAChatModel(model: CatalogModel, chatModels: string[]): ApiError {
  const hint = chatModels.length ? ` Chat models: ${chatModels.slice(0, 5).join(", ")}.` : " This server offers no chat model.";
  return badRequest(`The model '${model.id}' is an ${model.kind} model; /v1/chat/completions needs a chat model.${hint}`, "model", "model_not_chat");
}

/** The start of the last user message (a tool conversation may end with a tool's answer). */
export function historyPromptOf(messages: ChatMessage[]): string {
  const lastUser = messages.findLast((m) => m.role === "user")?.content ?? "";
  // A string has at least as many UTF-16 units as characters: a short one is kept whole without splitting it.
  if (lastUser.length <= HISTORY_PROMPT_CHARS) return lastUser;
  let end = 0;
  let chars = 0;
  while (end < lastUser.length && chars < HISTORY_PROMPT_CHARS) {
    const code = lastUser.charCodeAt(end);
    // A high surrogate followed by a low one is one character (never cut between the two).
    end += code >= 0xd800 && code <= 0xdbff && end + 1 < lastUser.length && (lastUser.charCodeAt(end + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
    chars++;
  }
  return lastUser.slice(0, end);
}

/** choices[0].message in OpenAI's shape: refusal always (null unless the model declined), tool_calls only when the model made some. */
function replyMessage(result: ChatResult) {
  const message = { role: "assistant" as const, content: result.content, refusal: result.refusal ?? null };
  return result.toolCalls?.length ? { ...message, tool_calls: result.toolCalls } : message;
}

export function chatRoutes(deps: ChatDeps) {
  const { catalog, clock } = deps;
  const flow: ChatFlowDeps = {
    store: deps.store,
    gate: deps.gates.chat,
    engines: deps.engines,
    background: deps.background,
    logger: deps.logger,
    clock,
    generationTimeoutMs: deps.config.limits.generation_timeout_ms,
    describeFailure,
  };
  const streaming: ChatStreamDeps = { flow, logger: deps.logger, heartbeatMs: deps.config.server.stream_heartbeat_ms };
  const allowStreaming = deps.config.chat.allow_streaming;

  /** The whole reply as one chat.completion (made in the flow's own frame: no async frame here). */
  function completion(chat: ChatRequest, created: number, signal: ClientSignal) {
    return runChatRequest(flow, chat, signal, ({ result }) => {
      // An engine that reports no usage answers 0s: the interface's usage object is not optional.
      const { promptTokens, completionTokens } = result.usage ?? { promptTokens: 0, completionTokens: 0 };
      return {
        id: chat.requestId,
        object: "chat.completion" as const,
        created,
        model: chat.model.id,
        choices: [{ index: 0, message: replyMessage(result), logprobs: null, finish_reason: result.finishReason }],
        usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
      };
    });
  }

  return new Elysia({ name: "v1.chat", prefix: "/v1" })
    .use(sharedModels)
    .model({ ChatCompletionRequest, ChatCompletion })
    // The parse hook (acceptApiBody) authenticates first, so the principal is known without a wait.
    .use(apiAuthAfterBody())
    .post(
      "/chat/completions",
      // Not async: a streamed answer (a Response) and a completion are two promise types, which Elysia accepts apart.
      ({ body, principal, request }) => {
        const violation = findChatRuleViolation(body, { allowStreaming });
        if (violation) throw badRequest(violation.message, violation.param, violation.code);
        const model = catalog.get(body.model);
        if (!model) throw modelNotFound(body.model);
        if (model.kind !== "chat") throw notAChatModel(model, catalog.list().filter((m) => m.kind === "chat").map((m) => m.id));
        assertModelAllowed(principal, model.id);

        // One id per request: the completion's id is the x-request-id, the history row's and the log line's.
        const id = metaOf(request).id;
        const created = Math.floor(clock() / 1000);
        const messages = chatMessagesFrom(body.messages);
        const chat: ChatRequest = {
          requestId: id,
          userId: principal.userId,
          keyId: principal.keyId,
          model,
          messages,
          params: chatParamsFrom(body),
          historyPrompt: historyPromptOf(messages),
        };
        // findChatRuleViolation let `stream: true` through only when [chat] allow_streaming is on.
        if (body.stream === true) return streamChatAnswer(streaming, chat, { created, includeUsage: body.stream_options?.include_usage === true }, request.signal);
        // Read only if the request runs long enough for a hang-up to matter (core/clientSignal).
        return completion(chat, created, () => request.signal);
      },
      {
        // acceptApiBody always answers (a body or an error), so the trailing "json" never runs: it is
        // there because the OpenAPI plugin derives the request content type from named parsers.
        parse: [acceptApiBody(deps.auth, "json"), "json"],
        transform: normalizeBody,
        body: "ChatCompletionRequest",
        response: { 200: "ChatCompletion", ...errorResponses(400, 401, 403, 404, 413, 415, 429, 500, 502, 503, 504) },
        detail: {
          tags: ["Chat"],
          summary: "Create a chat completion",
          description:
            "OpenAI's chat completion. Free: no credits are needed or charged; every request is recorded in the " +
            `request history. ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages whose content is a string or an array of text parts ` +
            `(joined with a line break; image, audio and file parts answer 400 \`unsupported_content_part\`), at most ${CHAT_LIMITS.maxTotalChars} characters ` +
            "in total, the last one from the user or a tool. `developer` messages are read as `system`. `tools` and `tool_choice` pass to " +
            "OpenAI-compatible upstreams, whose tool calls come back in `message.tool_calls` (builtin-chat answers 400 `tools_unsupported`). " +
            "`stream: true` answers 400 `stream_unsupported` unless the server enables `[chat] allow_streaming`, then server-sent " +
            "`chat.completion.chunk` events ending in `data: [DONE]` (or `data: {\"error\": …}` if the engine fails mid-reply); " +
            "a failure before the reply's first piece (an upstream's 429 or refusal, every attempt failing, the deadline) is the JSON error " +
            "with its status and headers, as without `stream`; " +
            "`n` must be 1. At most [limits] chat_concurrency chat requests run at once; more get 429 `concurrency_limit_exceeded` with retry-after.",
          security: bearerSecurity,
          operationId: "createChatCompletion",
        },
      },
    );
}
