/**
 * `openai` answers read back into our shapes. A missing or mistyped field is a failed attempt
 * (the pool retries elsewhere); nothing here redacts or downloads, the engine does.
 */
import type { ChatResult } from "../../core/engine";
import { AttemptFailure } from "../pool";
import { isPlainObject } from "../../core/values";

const FINISH_REASONS = new Set(["stop", "length", "content_filter", "tool_calls"]);

/** data[0] of an image answer: where the bytes are, and the revised prompt if one came. */
export interface ImageAnswer {
  image: { b64: string } | { url: string };
  revisedPrompt?: string;
}

export function parseImageAnswer(answer: unknown): ImageAnswer {
  const first = isPlainObject(answer) && Array.isArray(answer.data) ? (answer.data[0] as unknown) : undefined;
  if (!isPlainObject(first)) throw new AttemptFailure("failed", "upstream image answer has no data[0]");
  const revisedPrompt = typeof first.revised_prompt === "string" && first.revised_prompt.length > 0 ? first.revised_prompt : undefined;
  const withRevised = revisedPrompt === undefined ? {} : { revisedPrompt };
  if (typeof first.b64_json === "string") return { image: { b64: first.b64_json }, ...withRevised };
  if (typeof first.url === "string") return { image: { url: first.url }, ...withRevised };
  throw new AttemptFailure("failed", "upstream image answer has neither b64_json nor url");
}

/** choices[0] of a chat answer; an unknown finish reason reads as "stop", bad counts as 0. */
export function parseChatAnswer(answer: unknown): Omit<ChatResult, "trace"> {
  const choice = isPlainObject(answer) && Array.isArray(answer.choices) ? (answer.choices[0] as unknown) : undefined;
  if (!isPlainObject(choice) || !isPlainObject(choice.message)) throw new AttemptFailure("failed", "upstream chat answer has no choices[0].message");
  const content = choice.message.content;
  if (typeof content !== "string" && content !== null) throw new AttemptFailure("failed", "upstream chat answer's message content is not text");
  const reason = typeof choice.finish_reason === "string" && FINISH_REASONS.has(choice.finish_reason) ? choice.finish_reason : "stop";
  const usage = isPlainObject(answer) && isPlainObject(answer.usage) ? answer.usage : {};
  const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);
  return {
    content: content ?? "",
    finishReason: reason as ChatResult["finishReason"],
    usage: { promptTokens: count(usage.prompt_tokens), completionTokens: count(usage.completion_tokens) },
  };
}
