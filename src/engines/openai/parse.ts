/**
 * `openai` answers read back into our shapes. A missing or mistyped field is a failed attempt
 * (the pool retries elsewhere); nothing here redacts or downloads, the engine does.
 */
import type { ChatResult, ChatToolCall, ImageUsage } from "../../core/engine";
import type { ServerSentEvent } from "../upstreamHttp";
import { AttemptFailure } from "../pool";
import { isPlainObject } from "../../core/values";
import { newId } from "../../core/ids";

const FINISH_REASONS = new Set(["stop", "length", "content_filter", "tool_calls"]);

/** data[0] of an image answer: where the bytes are, the revised prompt and the answer's usage if they came. */
export interface ImageAnswer {
  image: { b64: string } | { url: string };
  revisedPrompt?: string;
  usage?: ImageUsage;
}

export function parseImageAnswer(answer: unknown): ImageAnswer {
  const first = isPlainObject(answer) && Array.isArray(answer.data) ? (answer.data[0] as unknown) : undefined;
  if (!isPlainObject(first)) throw new AttemptFailure("failed", "upstream image answer has no data[0]");
  const revisedPrompt = typeof first.revised_prompt === "string" && first.revised_prompt.length > 0 ? first.revised_prompt : undefined;
  const usage = parseImageUsage(isPlainObject(answer) ? answer.usage : undefined);
  const extras = { ...(revisedPrompt === undefined ? {} : { revisedPrompt }), ...(usage ? { usage } : {}) };
  if (typeof first.b64_json === "string") return { image: { b64: first.b64_json }, ...extras };
  if (typeof first.url === "string") return { image: { url: first.url }, ...extras };
  throw new AttemptFailure("failed", "upstream image answer has neither b64_json nor url");
}

/**
 * An image answer's `usage` in OpenAI's shape (openai-node's ImagesResponse.Usage, which its
 * completed stream event requires whole), copied field by field; undefined when there is none
 * or any count is not a non-negative integer: bad bookkeeping fails no image, and a client is
 * better served by no usage than by a half one.
 */
export function parseImageUsage(value: unknown): ImageUsage | undefined {
  if (!isPlainObject(value)) return undefined;
  const { input_tokens, output_tokens, total_tokens } = value;
  if (!isCount(input_tokens) || !isCount(output_tokens) || !isCount(total_tokens)) return undefined;
  const input = tokenDetails(value.input_tokens_details);
  if (!input) return undefined;
  const usage: ImageUsage = { input_tokens, output_tokens, total_tokens, input_tokens_details: input };
  if (value.output_tokens_details !== undefined) {
    const output = tokenDetails(value.output_tokens_details);
    if (!output) return undefined;
    usage.output_tokens_details = output;
  }
  return usage;
}

/** A token count as our answer's schema takes it: a whole number, not negative. */
function isCount(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

function tokenDetails(value: unknown): ImageUsage["input_tokens_details"] | undefined {
  if (!isPlainObject(value) || !isCount(value.text_tokens) || !isCount(value.image_tokens)) return undefined;
  return { text_tokens: value.text_tokens, image_tokens: value.image_tokens };
}

/**
 * One event of a streamed image answer (OpenAI's image streaming events): a partial image, the
 * completed image, an error, or something else (ignored). Both `image_generation.*` and
 * `image_edit.*` are read, from the JSON's `type` or else the SSE event name.
 */
export type ImageStreamEvent =
  | { kind: "partial"; b64: string }
  | { kind: "completed"; b64: string; usage?: ImageUsage }
  | { kind: "error"; message: string; refused: boolean }
  | { kind: "other" };

/** Error types that refuse the request itself (another account would refuse it too). */
const REFUSAL_TYPES = new Set(["invalid_request_error", "image_generation_user_error"]);

export function parseImageStreamEvent(sse: ServerSentEvent): ImageStreamEvent {
  let data: unknown;
  try {
    data = JSON.parse(sse.data);
  } catch {
    throw new AttemptFailure("failed", `upstream streamed a '${sse.event.slice(0, 60)}' event that is not JSON`);
  }
  const type = isPlainObject(data) && typeof data.type === "string" ? data.type : sse.event;
  if (type === "error" || sse.event === "error" || (isPlainObject(data) && data.error !== undefined && data.error !== null)) {
    const err = isPlainObject(data) && isPlainObject(data.error) ? data.error : isPlainObject(data) ? data : {};
    const message = typeof err.message === "string" ? err.message : "the upstream sent an error event";
    return { kind: "error", message, refused: typeof err.type === "string" && REFUSAL_TYPES.has(err.type) };
  }
  if (!isPlainObject(data)) return { kind: "other" };
  if (type === "image_generation.partial_image" || type === "image_edit.partial_image") {
    if (typeof data.b64_json !== "string") throw new AttemptFailure("failed", `upstream ${type} event has no b64_json`);
    return { kind: "partial", b64: data.b64_json };
  }
  if (type === "image_generation.completed" || type === "image_edit.completed") {
    if (typeof data.b64_json !== "string") throw new AttemptFailure("failed", `upstream ${type} event has no b64_json`);
    const usage = parseImageUsage(data.usage);
    return { kind: "completed", b64: data.b64_json, ...(usage ? { usage } : {}) };
  }
  return { kind: "other" };
}

/** choices[0] of a chat answer; an unknown finish reason reads as "stop", bad counts as 0, no usage object as unknown. */
export function parseChatAnswer(answer: unknown): ChatResult {
  const choice = isPlainObject(answer) && Array.isArray(answer.choices) ? (answer.choices[0] as unknown) : undefined;
  if (!isPlainObject(choice) || !isPlainObject(choice.message)) throw new AttemptFailure("failed", "upstream chat answer has no choices[0].message");
  const content = choice.message.content;
  if (typeof content !== "string" && content !== null && content !== undefined) throw new AttemptFailure("failed", "upstream chat answer's message content is not text");
  const refusal = choice.message.refusal;
  if (typeof refusal !== "string" && refusal !== null && refusal !== undefined) throw new AttemptFailure("failed", "upstream chat answer's message refusal is not text");
  const toolCalls = parseToolCalls(choice.message.tool_calls);
  const usage = isPlainObject(answer) ? parseUsage(answer.usage) : undefined;
  const refused = typeof refusal === "string" && refusal !== "";
  // A reply of tool calls only, or a refusal, has no text (null, as OpenAI answers it); any other reply has some.
  const reply: ChatResult = { content: typeof content === "string" ? content : toolCalls || refused ? null : "", finishReason: finishReasonOf(choice.finish_reason) };
  if (refused) reply.refusal = refusal;
  if (toolCalls) reply.toolCalls = toolCalls;
  if (usage) reply.usage = usage;
  return reply;
}

export function finishReasonOf(value: unknown): ChatResult["finishReason"] {
  return typeof value === "string" && FINISH_REASONS.has(value) ? (value as ChatResult["finishReason"]) : "stop";
}

/** OpenAI's usage object as our counts (a bad count reads as 0); undefined when there is none. */
export function parseUsage(usage: unknown): ChatResult["usage"] {
  if (!isPlainObject(usage)) return undefined;
  const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);
  return { promptTokens: count(usage.prompt_tokens), completionTokens: count(usage.completion_tokens) };
}

/**
 * A tool call's id as the upstream gave it, or one of ours when it gave none, "" (some
 * OpenAI-compatible servers do) or no text: the client needs one to answer the call with a
 * `tool` message, and our answer's schema requires it. The streamed path does the same.
 */
export function toolCallIdOf(id: unknown): string {
  return typeof id === "string" && id !== "" ? id : newToolCallId();
}

/** An id in OpenAI's form (`call_` and random characters), unique enough to tell a reply's calls apart. */
export function newToolCallId(): string {
  return newId("call_");
}

/** message.tool_calls: function calls with a name and the arguments text (an id made up if missing); anything else is a failed attempt. */
function parseToolCalls(value: unknown): ChatToolCall[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw new AttemptFailure("failed", "upstream chat answer's tool_calls is not an array");
  const calls = value.map((c): ChatToolCall => {
    const fn = isPlainObject(c) ? c.function : undefined;
    if (!isPlainObject(c) || !isPlainObject(fn) || typeof fn.name !== "string" || fn.name === "" || typeof fn.arguments !== "string") {
      throw new AttemptFailure("failed", "upstream chat answer has a tool call without a function name or arguments text");
    }
    return { id: toolCallIdOf(c.id), type: "function", function: { name: fn.name, arguments: fn.arguments } };
  });
  return calls.length ? calls : undefined;
}

/**
 * One event of a streamed chat answer (OpenAI's `chat.completion.chunk`s, then `[DONE]`): the
 * pieces of choices[0].delta (text, refusal, tool call fragments), its finish reason, the usage chunk, or an error the upstream
 * sent instead of the next chunk.
 */
export type ChatStreamEvent =
  | { kind: "done" }
  | { kind: "error"; message: string }
  | { kind: "chunk"; content?: string; refusal?: string; toolCalls: ChatToolCallPiece[]; finishReason?: ChatResult["finishReason"]; usage?: ChatResult["usage"] };

/** A fragment of a tool call as streamed: `index` says which; id and name come with its first fragment. */
export interface ChatToolCallPiece {
  index: number;
  id?: string;
  name?: string;
  arguments?: string;
}

export function parseChatStreamEvent(sse: ServerSentEvent): ChatStreamEvent {
  if (sse.data.trim() === "[DONE]") return { kind: "done" };
  let data: unknown;
  try {
    data = JSON.parse(sse.data);
  } catch {
    throw new AttemptFailure("failed", "upstream streamed a chat chunk that is not JSON");
  }
  if (!isPlainObject(data)) throw new AttemptFailure("failed", "upstream streamed a chat chunk that is not an object");
  if (sse.event === "error" || (data.error !== undefined && data.error !== null)) {
    const err = isPlainObject(data.error) ? data.error : data;
    return { kind: "error", message: typeof err.message === "string" ? err.message : "the upstream sent an error event" };
  }
  const usage = parseUsage(data.usage);
  const choice = Array.isArray(data.choices) ? (data.choices.find((c) => isPlainObject(c) && (c.index ?? 0) === 0) as unknown) : undefined;
  const delta = isPlainObject(choice) && isPlainObject(choice.delta) ? choice.delta : {};
  if (delta.content !== undefined && delta.content !== null && typeof delta.content !== "string") throw new AttemptFailure("failed", "upstream streamed chat content that is not text");
  if (delta.refusal !== undefined && delta.refusal !== null && typeof delta.refusal !== "string") throw new AttemptFailure("failed", "upstream streamed a chat refusal that is not text");
  const toolCalls = Array.isArray(delta.tool_calls) ? delta.tool_calls.map(parseToolCallPiece) : [];
  return {
    kind: "chunk",
    ...(typeof delta.content === "string" && delta.content !== "" ? { content: delta.content } : {}),
    ...(typeof delta.refusal === "string" && delta.refusal !== "" ? { refusal: delta.refusal } : {}),
    toolCalls,
    ...(isPlainObject(choice) && typeof choice.finish_reason === "string" ? { finishReason: finishReasonOf(choice.finish_reason) } : {}),
    ...(usage ? { usage } : {}),
  };
}

function parseToolCallPiece(value: unknown): ChatToolCallPiece {
  if (!isPlainObject(value) || typeof value.index !== "number" || !Number.isInteger(value.index) || value.index < 0 || value.index > 1023) {
    throw new AttemptFailure("failed", "upstream streamed a tool call fragment without a valid index");
  }
  const fn = isPlainObject(value.function) ? value.function : {};
  const text = (v: unknown) => (typeof v === "string" ? v : undefined);
  const piece: ChatToolCallPiece = { index: value.index };
  const id = text(value.id);
  const name = text(fn.name);
  const args = text(fn.arguments);
  if (id !== undefined) piece.id = id;
  if (name !== undefined) piece.name = name;
  if (args !== undefined) piece.arguments = args;
  return piece;
}
