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
 * The answer is held until the reply's first piece (or its end): that is where an engine stops
 * retrying (engines/openai/chatStream: once a piece is passed on, no other attempt may follow),
 * so every failure before it — a 429 from the upstream, a request it refuses, every attempt
 * failing, the deadline — is the same JSON error, status and headers (retry-after) as without
 * `stream`, and the openai clients raise (and retry by) its proper class. OpenAI answers
 * request-level failures before streaming too. Nothing is sent while waiting (the status is
 * not decided yet, so no heartbeat either): [limits] generation_timeout_ms bounds that wait,
 * and the server's idle timeout is off for this route as for any long POST.
 *
 * A failure after the stream began (the upstream broke mid-reply, the deadline passed) ends it
 * with `data: {"error":{message,type,param,code}}` and no `[DONE]`; the openai clients raise it
 * as an APIError. From the first piece on, a comment line goes out after every
 * [server] stream_heartbeat_ms of silence.
 *
 * A client that goes away aborts the engine (and so the upstream request), unlike an image
 * stream: a chat reply nobody reads has no use. The history row is written as for any request:
 * status, token counts when the engine reported them (else null), client_disconnected.
 */
import { runChatRequest, type ChatFlowDeps, type ChatOutcome, type ChatRequest } from "../../../core/chatRequests";
import type { ChatDelta } from "../../../core/engine";
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

  // The stream opens with the reply's first piece (see above); until then a failure is thrown to the route's JSON error.
  let opened = false;
  const firstPiece = Promise.withResolvers<void>();
  const open = () => {
    if (opened) return;
    opened = true;
    // The role chunk goes out at once with the status line and headers: no comment needed to send them.
    stream.startHeartbeat(false);
    stream.data(chunk({ role: "assistant", content: "", refusal: null }));
    firstPiece.resolve();
  };
  const onDelta = (delta: ChatDelta) => {
    open();
    stream.data(chunk(wireDelta(delta)));
  };

  const outcome = runChatRequest(deps.flow, { ...req, onDelta }, signal);
  await Promise.race([firstPiece.promise, outcome.then(noop, noop)]);
  if (!opened) {
    try {
      await outcome;
    } catch (e) {
      stream.close();
      throw e;
    }
    // A reply without a single piece (empty text): still a stream, of the role and the end.
    open();
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

function noop(): void {}
