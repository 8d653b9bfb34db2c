/**
 * builtin-chat: a deterministic, offline chat engine for trying the service and checking the
 * wiring end to end. It is not a language model: it restates the last user message, and when
 * the request asks for JSON it returns JSON (matching a given json_schema). It honours
 * max_tokens / max_completion_tokens and stop sequences like a real engine would.
 *
 * Token counts are an estimate, not a tokenizer: one token per 4 characters (rounded up) of
 * each text, plus 4 per prompt message for its role and framing, plus 3 to prime the reply.
 *
 * It calls no tools: a request with `tools` is refused (400 `tools_unsupported`) rather than
 * answered as if the tools were not there. A streamed request gets the same reply in pieces of
 * STREAM_PIECE_CHARS characters.
 */
import { completionTokenLimit, countChars, type ChatParams, type ResponseFormat } from "../../core/chatRequest";
import { EngineTimeout, type ChatEngine, type ChatJob, type ChatMessage, type ChatRequestProblem, type ChatResult } from "../../core/engine";
import { fillFromSchema } from "./jsonFromSchema";

const CHARS_PER_TOKEN = 4;
const TOKENS_PER_MESSAGE = 4;
const TOKENS_TO_PRIME_REPLY = 3;
export const REPLY_PREFIX = "You said: ";
/** A streamed reply's piece size: small enough that a short reply still arrives as several chunks. */
export const STREAM_PIECE_CHARS = 8;

export function estimateTokens(text: string): number {
  return Math.ceil(countChars(text) / CHARS_PER_TOKEN);
}

export function estimatePromptTokens(messages: ChatMessage[]): number {
  return messages.reduce((sum, m) => sum + TOKENS_PER_MESSAGE + estimateTokens(m.content), TOKENS_TO_PRIME_REPLY);
}

/** ChatJob.params is engine-neutral (Record<string, unknown>); read back the fields this engine uses. */
function readParams(params: Record<string, unknown>): Pick<ChatParams, "max_tokens" | "max_completion_tokens" | "stop" | "response_format"> {
  const int = (v: unknown) => (typeof v === "number" && Number.isInteger(v) && v > 0 ? v : undefined);
  const stop = Array.isArray(params.stop) ? params.stop.filter((s): s is string => typeof s === "string" && s.length > 0) : [];
  const rf = params.response_format;
  let response_format: ResponseFormat | undefined;
  if (typeof rf === "object" && rf !== null && "type" in rf) {
    if (rf.type === "json_object") response_format = { type: "json_object" };
    if (rf.type === "json_schema" && "json_schema" in rf && typeof rf.json_schema === "object" && rf.json_schema !== null) {
      const js = rf.json_schema as { name?: unknown; schema?: unknown };
      if (typeof js.schema === "object" && js.schema !== null && !Array.isArray(js.schema)) {
        response_format = { type: "json_schema", json_schema: { name: String(js.name ?? "reply"), schema: js.schema as Record<string, unknown> } };
      }
    }
  }
  return { max_tokens: int(params.max_tokens), max_completion_tokens: int(params.max_completion_tokens), stop, response_format };
}

function lastUserMessage(messages: ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === "user") return messages[i]!.content;
  return "";
}

/** The reply for the requested format; `complete` is false when a json_schema reply hit its size cap. */
function composeReply(messages: ChatMessage[], format: ResponseFormat | undefined): { text: string; complete: boolean } {
  const said = lastUserMessage(messages);
  if (format?.type === "json_object") return { text: JSON.stringify({ reply: REPLY_PREFIX + said, message_count: messages.length }), complete: true };
  if (format?.type === "json_schema") {
    const { value, complete } = fillFromSchema(format.json_schema.schema, { text: said });
    return { text: JSON.stringify(value), complete };
  }
  return { text: REPLY_PREFIX + said, complete: true };
}

/** Its replies always have text and token counts (estimated). */
export type BuiltinChatResult = ChatResult & { content: string; usage: NonNullable<ChatResult["usage"]> };

export class BuiltinChatEngine implements ChatEngine {
  requestProblem(job: Pick<ChatJob, "params">): ChatRequestProblem | null {
    const tools = job.params.tools;
    if (Array.isArray(tools) && tools.length > 0) {
      return {
        param: "tools",
        code: "tools_unsupported",
        message: "builtin-chat calls no tools: send the request without 'tools' (and 'tool_choice'), or use a chat model of an OpenAI-compatible upstream.",
      };
    }
    return null;
  }

  async chat(job: ChatJob): Promise<BuiltinChatResult> {
    const result = this.reply(job);
    if (job.onDelta && result.content) {
      const chars = [...result.content];
      for (let i = 0; i < chars.length; i += STREAM_PIECE_CHARS) {
        // Stopped like an upstream call would be: the reply was not delivered, so it did not succeed.
        if (job.signal.aborted) throw new EngineTimeout("the request was cancelled or ran out of time while the reply streamed");
        job.onDelta({ content: chars.slice(i, i + STREAM_PIECE_CHARS).join("") });
        // One piece per turn of the event loop, as a real stream arrives: the answer is written as it goes.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    return result;
  }

  private reply(job: ChatJob): BuiltinChatResult {
    const params = readParams(job.params);
    const reply = composeReply(job.messages, params.response_format);
    let content = reply.text;
    // A schema that demands more than the engine writes gets a cut reply, as a model's output limit would.
    let finishReason: ChatResult["finishReason"] = reply.complete ? "stop" : "length";

    // A stop sequence ends the reply before it, as with a real model.
    const cut = Math.min(...(params.stop ?? []).map((s) => content.indexOf(s)).filter((i) => i >= 0));
    if (Number.isFinite(cut)) content = content.slice(0, cut);

    const limit = completionTokenLimit(params);
    if (limit !== undefined && estimateTokens(content) > limit) {
      // Truncated JSON is not valid JSON; OpenAI behaves the same, and finish_reason says why.
      content = [...content].slice(0, limit * CHARS_PER_TOKEN).join("");
      finishReason = "length";
    }
    return {
      content,
      finishReason,
      usage: { promptTokens: estimatePromptTokens(job.messages), completionTokens: estimateTokens(content) },
    };
  }
}
