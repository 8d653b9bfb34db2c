/**
 * The streamed answer of a chat completion (`stream: true`, when `[chat] allow_streaming` is
 * on), in OpenAI's own convention so the official clients' `chat.completions.create({ stream:
 * true })` iterates it unmodified. The body is `text/event-stream` of unnamed `data:` lines:
 *
 *   data: {"id","object":"chat.completion.chunk","created","model","choices":[{"index":0,"delta":{"role":"assistant","content":""},…}]}
 *   data: … one chunk per piece of the reply: delta.content, delta.refusal, or delta.tool_calls fragments …
 *   data: {… "choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}
 *   data: {… "choices":[],"usage":{…}}        (only with stream_options.include_usage, when the engine reported usage)
 *   data: [DONE]
 *
 * A failure after the stream began (the upstream broke mid-reply, the deadline passed) ends it
 * with `data: {"error":{message,type,param,code}}` and no `[DONE]`; the openai clients raise it
 * as an APIError. A failure before the engine starts (validation, tools for builtin-chat, 429 at
 * the chat gate) is the usual JSON error with its status. A comment line goes out after every
 * [server] stream_heartbeat_ms of silence.
 *
 * A client that goes away aborts the engine (and so the upstream request), unlike an image
 * stream: a chat reply nobody reads has no use. The history row is written as for any request:
 * status, token counts when the engine reported them (else null), client_disconnected.
 */
import { runChatRequest, type ChatFlowDeps, type ChatOutcome, type ChatRequest } from "../../../core/chatRequests";
import type { ChatDelta, EngineLookup } from "../../../core/engine";
import type { Logger } from "../../../logger";
import { apiErrorOf } from "../../errorMapping";
import { serverError } from "../../errors";
import { EventStream, eventStreamResponse } from "../../eventStream";

export interface ChatStreamDeps {
  flow: ChatFlowDeps;
  logger: Logger;
  /** Longest silence on the stream before a comment line is sent ([server] stream_heartbeat_ms). */
  heartbeatMs: number;
}

export interface ChatStreamShape {
  created: number;
  /** stream_options.include_usage: end with a usage chunk. */
  includeUsage: boolean;
}

export async function streamChatAnswer(deps: ChatStreamDeps, req: ChatRequest, shape: ChatStreamShape, requestSignal: AbortSignal): Promise<Response> {
  const readerGone = new AbortController();
  const stream = new EventStream(deps.heartbeatMs, () => readerGone.abort());
  const signal = AbortSignal.any([requestSignal, readerGone.signal]);
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
    id: req.requestId,
    object: "chat.completion.chunk",
    created: shape.created,
    model: req.model.id,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  });

  // The stream opens when the engine starts: before any piece of the reply, after every check that answers JSON.
  let opened = false;
  let announce!: () => void;
  const started = new Promise<void>((resolve) => (announce = resolve));
  const open = () => {
    if (opened) return;
    opened = true;
    stream.startHeartbeat();
    stream.data(chunk({ role: "assistant", content: "", refusal: null }));
    announce();
  };
  const onDelta = (delta: ChatDelta) => {
    open();
    stream.data(chunk(wireDelta(delta)));
  };

  const flow = { ...deps.flow, engines: announcingStart(deps.flow.engines, open) };
  const outcome = runChatRequest(flow, { ...req, onDelta }, signal);
  await Promise.race([started, outcome.then(noop, noop)]);
  if (!opened) {
    try {
      await outcome;
    } catch (e) {
      stream.close();
      throw e;
    }
  }

  outcome
    .then(
      ({ result }: ChatOutcome) => {
        stream.data(chunk({}, result.finishReason));
        if (shape.includeUsage && result.usage) {
          const { promptTokens, completionTokens } = result.usage;
          stream.data({ ...chunk({}), choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens } });
        }
        stream.data("[DONE]");
      },
      (e: unknown) => {
        const known = apiErrorOf(e);
        if (!known) deps.logger.error("streamed chat request failed unexpectedly", { request_id: req.requestId, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
        stream.data({ error: (known ?? serverError()).body().error });
      },
    )
    .finally(() => stream.close());

  return eventStreamResponse(stream);
}

/** A piece of the reply in OpenAI's delta shape. */
function wireDelta(delta: ChatDelta): Record<string, unknown> {
  return {
    ...(delta.content !== undefined ? { content: delta.content } : {}),
    ...(delta.refusal !== undefined ? { refusal: delta.refusal } : {}),
    ...(delta.toolCalls ? { tool_calls: delta.toolCalls } : {}),
  };
}

/** The engine lookup, telling when a chat reaches its engine (after the gate admitted it). */
function announcingStart(engines: EngineLookup, started: () => void): EngineLookup {
  return {
    imageEngine: (model) => engines.imageEngine(model),
    chatEngine(model) {
      const engine = engines.chatEngine(model);
      if (!engine) return undefined;
      return {
        chat: (job) => (started(), engine.chat(job)),
        ...(engine.requestProblem ? { requestProblem: engine.requestProblem.bind(engine) } : {}),
      };
    },
  };
}

function noop(): void {}
