/**
 * The rules of a chat completion request that a JSON schema cannot state (total length of all
 * contents, the role of the last message, streaming), and the hand-off of the validated
 * OpenAI parameters to the engine. The http layer checks types and ranges with its schema
 * first; this module sees only well-typed requests.
 */
import type { ChatMessage } from "./engine";

/** The interface's limits, fixed by the API contract (not configuration). */
export const CHAT_LIMITS = {
  minMessages: 1,
  maxMessages: 40,
  /** Unicode code points across every message's content. */
  maxTotalChars: 60_000,
  maxStopSequences: 4,
} as const;

export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; json_schema: { name: string; description?: string; schema: Record<string, unknown>; strict?: boolean | null } };

/** What the core needs from a schema-checked request body (null means "not given", as in OpenAI's API). */
export interface ChatRequestInput {
  model: string;
  messages: ChatMessage[];
  stream?: boolean | null;
  n?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  stop?: string | string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  seed?: number | null;
  response_format?: {
    type: "text" | "json_object" | "json_schema";
    json_schema?: { name: string; description?: string; schema?: Record<string, unknown>; strict?: boolean | null };
  };
  user?: string | null;
}

/**
 * The parameters an engine receives (ChatJob.params): only those the client gave, never null.
 * A type alias, not an interface, so it is assignable to ChatJob's Record<string, unknown>.
 */
export type ChatParams = {
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  max_completion_tokens?: number;
  stop?: string[];
  presence_penalty?: number;
  frequency_penalty?: number;
  seed?: number;
  response_format?: ResponseFormat;
  user?: string;
};

/** A broken rule: the field at fault (OpenAI `param` convention) and a message that states the rule. */
export interface ChatRuleViolation {
  param: string;
  message: string;
  code: string;
}

export function countChars(s: string): number {
  let n = 0;
  // Code points, not UTF-16 units: an emoji is one character to the person who typed it.
  for (const _ of s) n++;
  return n;
}

/** The first rule the request breaks, or null. Runs after the schema accepted the body. */
export function findChatRuleViolation(req: ChatRequestInput): ChatRuleViolation | null {
  if (req.stream === true) {
    return {
      param: "stream",
      code: "stream_unsupported",
      message: "Streaming is not supported: this service answers chat completions in one response. Omit 'stream' or set it to false.",
    };
  }
  let total = 0;
  for (const m of req.messages) total += countChars(m.content);
  if (total > CHAT_LIMITS.maxTotalChars) {
    return {
      param: "messages",
      code: "context_length_exceeded",
      message: `The total length of all message contents must be at most ${CHAT_LIMITS.maxTotalChars} characters; this request has ${total}.`,
    };
  }
  const last = req.messages.length - 1;
  const lastRole = req.messages[last]!.role;
  if (lastRole !== "user") {
    return {
      param: `messages[${last}].role`,
      code: "invalid_value",
      message: `The last message must have role 'user' (the one to answer); messages[${last}] has role '${lastRole}'.`,
    };
  }
  const format = req.response_format;
  if (format?.type === "json_schema") {
    if (!format.json_schema) {
      return {
        param: "response_format.json_schema",
        code: "missing_required_parameter",
        message: "response_format of type 'json_schema' requires 'json_schema' with a 'name' and a 'schema'.",
      };
    }
    if (!format.json_schema.schema) {
      return {
        param: "response_format.json_schema.schema",
        code: "missing_required_parameter",
        message: "response_format.json_schema requires 'schema': the JSON Schema the reply must match.",
      };
    }
  }
  return null;
}

/** The engine's parameters from a request that passed findChatRuleViolation. */
export function chatParamsFrom(req: ChatRequestInput): ChatParams {
  const p: ChatParams = {};
  if (req.temperature != null) p.temperature = req.temperature;
  if (req.top_p != null) p.top_p = req.top_p;
  if (req.max_tokens != null) p.max_tokens = req.max_tokens;
  if (req.max_completion_tokens != null) p.max_completion_tokens = req.max_completion_tokens;
  if (req.stop != null) p.stop = typeof req.stop === "string" ? [req.stop] : [...req.stop];
  if (req.presence_penalty != null) p.presence_penalty = req.presence_penalty;
  if (req.frequency_penalty != null) p.frequency_penalty = req.frequency_penalty;
  if (req.seed != null) p.seed = req.seed;
  if (req.user != null) p.user = req.user;
  const f = req.response_format;
  if (f) {
    if (f.type === "json_schema" && f.json_schema?.schema) {
      const { name, description, schema, strict } = f.json_schema;
      p.response_format = {
        type: "json_schema",
        json_schema: { name, schema, ...(description !== undefined ? { description } : {}), ...(strict != null ? { strict } : {}) },
      };
    } else if (f.type !== "json_schema") {
      p.response_format = { type: f.type };
    }
  }
  return p;
}

/** The completion budget the client set: the smaller of max_tokens and max_completion_tokens. */
export function completionTokenLimit(p: ChatParams): number | undefined {
  const limits = [p.max_tokens, p.max_completion_tokens].filter((n): n is number => n !== undefined);
  return limits.length ? Math.min(...limits) : undefined;
}
