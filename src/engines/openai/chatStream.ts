/**
 * A streamed `openai` chat answer passed on as it arrives: each chunk's text, refusal and tool
 * call fragments go to the job's onDelta (redacted as a stream, so a key split across chunks is
 * still removed), and the whole reply is assembled for the flow's result and history row.
 *
 * Once a piece has been passed on, no other attempt may follow (the client would get the reply
 * twice): every failure from then on is final. Before that, a failure is an ordinary failed
 * attempt that the pool may retry on another account.
 */
import type { ChatDelta, ChatResult, ChatToolCall } from "../../core/engine";
import { MAX_UPSTREAM_MESSAGE_CHARS, type AnswerStream, type SecretRedactor } from "../redact";
import { AttemptFailure } from "../pool";
import type { ServerSentEvent } from "../upstreamHttp";
import { parseChatStreamEvent, toolCallIdOf, type ChatToolCallPiece } from "./parse";

type Reply = Omit<ChatResult, "trace">;

interface ToolCallState {
  id: string;
  name: string;
  arguments: string;
  redacting: AnswerStream;
}

export async function replyFromChunks(events: AsyncGenerator<ServerSentEvent>, onDelta: (delta: ChatDelta) => void, redactor: SecretRedactor): Promise<Reply> {
  const text = redactor.answerStream();
  const refusing = redactor.answerStream();
  const calls = new Map<number, ToolCallState>();
  let content = "";
  let refusal = "";
  let passedOn = false;
  let finishReason: ChatResult["finishReason"] | undefined;
  let usage: ChatResult["usage"];
  let done = false;
  const send = (delta: ChatDelta) => {
    passedOn = true;
    onDelta(delta);
  };

  try {
    for await (const sse of events) {
      const event = parseChatStreamEvent(sse);
      if (event.kind === "done") {
        done = true;
        break;
      }
      if (event.kind === "error") throw new AttemptFailure("failed", `the upstream stream failed: ${redactor.message(event.message, MAX_UPSTREAM_MESSAGE_CHARS)}`);
      if (event.content !== undefined) {
        const out = text.push(event.content);
        content += out;
        if (out) send({ content: out });
      }
      if (event.refusal !== undefined) {
        const out = refusing.push(event.refusal);
        refusal += out;
        if (out) send({ refusal: out });
      }
      const pieces = event.toolCalls.map((p) => toolCallDelta(p, calls, redactor)).filter((d) => d !== null);
      if (pieces.length) send({ toolCalls: pieces });
      if (event.finishReason) finishReason = event.finishReason;
      if (event.usage) usage = event.usage;
    }
    // Some servers end without `[DONE]`; a finish reason says the reply is whole all the same.
    if (!done && !finishReason) throw new AttemptFailure("failed", "the upstream stream ended before the reply did");
  } catch (e) {
    if (passedOn && e instanceof AttemptFailure) throw new AttemptFailure(e.kind, e.message, e.retryAfterMs, e.status, true);
    throw e;
  }

  const rest = text.end();
  content += rest;
  const refusalRest = refusing.end();
  refusal += refusalRest;
  const tail: NonNullable<ChatDelta["toolCalls"]> = [];
  for (const [index, call] of calls) {
    const args = call.redacting.end();
    call.arguments += args;
    if (args) tail.push({ index, function: { arguments: args } });
  }
  if (rest || refusalRest || tail.length) send({ ...(rest ? { content: rest } : {}), ...(refusalRest ? { refusal: refusalRest } : {}), ...(tail.length ? { toolCalls: tail } : {}) });

  const toolCalls: ChatToolCall[] = [...calls.values()].map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  return {
    // No text beside tool calls or a refusal is null, as in a whole answer (parse.ts).
    content: content === "" && (toolCalls.length || refusal) ? null : content,
    ...(refusal ? { refusal } : {}),
    ...(toolCalls.length ? { toolCalls } : {}),
    finishReason: finishReason ?? "stop",
    ...(usage ? { usage } : {}),
  };
}

/**
 * A tool call fragment as passed on: the first one of a call carries its id (one of ours when
 * the upstream sent none, as for a whole answer: parse.ts toolCallIdOf), type and (redacted)
 * name; arguments are redacted as a stream.
 */
function toolCallDelta(piece: ChatToolCallPiece, calls: Map<number, ToolCallState>, redactor: SecretRedactor): NonNullable<ChatDelta["toolCalls"]>[number] | null {
  let call = calls.get(piece.index);
  const first = !call;
  if (!call) {
    if (!piece.name) throw new AttemptFailure("failed", "upstream streamed a tool call whose first fragment has no function name");
    call = { id: toolCallIdOf(piece.id), name: redactor.answer(piece.name), arguments: "", redacting: redactor.answerStream() };
    calls.set(piece.index, call);
  }
  const args = piece.arguments ? call.redacting.push(piece.arguments) : "";
  call.arguments += args;
  if (first) return { index: piece.index, id: call.id, type: "function", function: { name: call.name, arguments: args } };
  return args ? { index: piece.index, function: { arguments: args } } : null;
}

/** An upstream that answered one JSON document to a streamed request: its reply passed on as one piece. */
export function passOnWhole(reply: Reply, onDelta: (delta: ChatDelta) => void): void {
  const toolCalls = reply.toolCalls?.map((c, index) => ({ index, id: c.id, type: "function" as const, function: { name: c.function.name, arguments: c.function.arguments } }));
  if (reply.content || reply.refusal || toolCalls) {
    onDelta({ ...(reply.content ? { content: reply.content } : {}), ...(reply.refusal ? { refusal: reply.refusal } : {}), ...(toolCalls ? { toolCalls } : {}) });
  }
}
