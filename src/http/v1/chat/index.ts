/**
 * POST /v1/chat/completions: OpenAI's non-streaming chat completion, free of charge.
 *   auth → parse (parse.ts) → validate (model.ts, then the core rules) → resolve the model →
 *   runChatRequest (core/chatRequests.ts: engine, chat gate, deadline, history) → answer.
 * No credit check and no ledger row: chat works at a zero balance. Failures are thrown and
 * mapped in http/errorMapping.
 */
import { Elysia } from "elysia";
import { CHAT_LIMITS, chatParamsFrom, findChatRuleViolation } from "../../../core/chatRequest";
import { runChatRequest, type ChatFlowDeps } from "../../../core/chatRequests";
import { newId } from "../../../core/ids";
import type { CatalogModel } from "../../../core/models";
import type { Services } from "../../../services";
import { apiAuth, assertModelAllowed } from "../../auth";
import { acceptApiBody } from "../../body";
import { describeFailure } from "../../errorMapping";
import { badRequest, modelNotFound, type ApiError } from "../../errors";
import { metaOf } from "../../requestMeta";
import { bearerSecurity, errorResponses, sharedModels } from "../../shared";
import { ChatCompletion, ChatCompletionRequest } from "./model";
import { normalizeBody } from "./parse";

type ChatDeps = Pick<Services, "config" | "store" | "logger" | "clock" | "catalog" | "auth" | "background" | "engines" | "gates">;

/** How much of the last user message the request history keeps. */
const HISTORY_PROMPT_CHARS = 500;

function notAChatModel(model: CatalogModel, chatModels: string[]): ApiError {
  const hint = chatModels.length ? ` Chat models: ${chatModels.slice(0, 5).join(", ")}.` : " This server offers no chat model.";
  return badRequest(`The model '${model.id}' is an ${model.kind} model; /v1/chat/completions needs a chat model.${hint}`, "model", "model_not_chat");
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
        assertModelAllowed(principal, model.id);

        const id = newId("chatcmpl-");
        // The access log reads the outcome from this record.
        metaOf(request).recordId = id;
        const created = Math.floor(clock() / 1000);
        const lastUser = body.messages[body.messages.length - 1]!.content;
        const { result } = await runChatRequest(
          flow,
          {
            requestId: id,
            userId: principal.userId,
            keyId: principal.keyId,
            model,
            messages: body.messages,
            params: chatParamsFrom(body),
            historyPrompt: [...lastUser].slice(0, HISTORY_PROMPT_CHARS).join(""),
          },
          request.signal,
        );
        const { promptTokens, completionTokens } = result.usage;
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
        parse: [acceptApiBody(deps.auth, "json"), "json"],
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
