/**
 * The one interface every engine implements (built-in, OpenAI-compatible, SD WebUI).
 * Engines know nothing of credits or of our HTTP statuses: they return results or throw the
 * typed errors below, and the http layer maps those.
 */
import type { CancelScope } from "./cancelScope";
import type { CatalogModel } from "./models";

export type ImageMime = "image/png" | "image/jpeg" | "image/webp";

/** An image whose bytes were sniffed and whose dimensions were read from its header. */
export interface ImageInput {
  bytes: Uint8Array;
  mime: ImageMime;
  width: number;
  height: number;
  /** The request field it came from (`image[1]`, `reference_images[0]`, `mask`), for errors. */
  param?: string;
}

export interface RequestedSize {
  width: number;
  height: number;
}

/** Which upstream served a request; recorded in the history (never a key). */
export interface UpstreamTrace {
  upstreamId: string;
  accountId: string;
  attempts: number;
  upstreamLatencyMs: number;
}

export interface ImageJob {
  model: CatalogModel;
  prompt: string;
  /** null means "auto": the engine picks. */
  size: RequestedSize | null;
  quality: string;
  /** Generations: reference images. Edits: the images to edit (first is the base). */
  images: ImageInput[];
  /** Edits only: PNG with alpha; transparent = repaint here. */
  mask?: ImageInput;
  /** OpenAI's pass-through fields (background, output_format, style, user, …). */
  extra: Record<string, unknown>;
  signal: AbortSignal;
  /**
   * How many partial images the client asked for (0–3, streaming only); an engine that can
   * show intermediate pictures reports at most this many through onProgress.
   */
  partialImages?: number;
  /**
   * Progress as the engine knows it: a fraction (0..1) and, when it has one, an intermediate
   * picture. Optional for engines; calling it never throws and never blocks the engine.
   */
  onProgress?: (report: ProgressReport) => void;
}

/** One progress report of a running generation. */
export interface ProgressReport {
  /** 0..1, when the engine can tell. */
  fraction?: number;
  /** An intermediate picture (a PNG, JPEG or WebP of any size), when the engine has one. */
  partial?: { bytes: Uint8Array; mime: ImageMime; width: number; height: number };
}

export interface GeneratedImage {
  bytes: Uint8Array;
  mime: ImageMime;
  width: number;
  height: number;
  revisedPrompt?: string;
  /** The upstream's token counts, when it reported them (OpenAI's GPT image models do). */
  usage?: ImageUsage;
  trace?: UpstreamTrace;
}

/**
 * OpenAI's image `usage` object, in its own field names: it is passed to the client as it came
 * (the answer's `usage`, the completed stream event's), checked but not reinterpreted.
 */
export interface ImageUsage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
  input_tokens_details: { text_tokens: number; image_tokens: number };
  output_tokens_details?: { text_tokens: number; image_tokens: number };
}

/** A function call the assistant asked for (OpenAI's `tool_calls[]` item). */
export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/**
 * One message of a conversation, as every engine receives it: text only (an array of text
 * parts arrives joined), `developer` already read as `system`. An assistant message may carry
 * the tool calls it made; a `tool` message answers one of them.
 */
export type ChatMessage =
  | { role: "system" | "user"; content: string }
  | { role: "assistant"; content: string; toolCalls?: ChatToolCall[] }
  | { role: "tool"; content: string; toolCallId: string };

export interface ChatJob {
  model: CatalogModel;
  messages: ChatMessage[];
  /** Validated OpenAI parameters (temperature, max_tokens, response_format, tools, tool_choice, …). */
  params: Record<string, unknown>;
  /** Aborts at the request's deadline or when its client leaves. */
  signal: AbortSignal;
  /**
   * The same cancellation as `signal`, when the flow runs the job: an engine that runs attempts
   * in the account pool hands this to the pool (pool.run), which links each attempt to it
   * without `signal` ever being made (reading `signal` makes an AbortSignal: core/cancelScope).
   */
  cancel?: CancelScope;
  /**
   * Set when the client asked for a streamed answer: the engine reports the reply's pieces
   * here as they come, in order, and still resolves with the whole result. Calling it never
   * throws into the engine.
   */
  onDelta?: (delta: ChatDelta) => void;
}

/**
 * A piece of a streamed reply: text to append, and/or fragments of tool calls (OpenAI's
 * `delta.tool_calls[]`: `index` says which call; id, type and name come with its first fragment).
 */
export interface ChatDelta {
  content?: string;
  /** Text to append to the model's refusal (OpenAI's `delta.refusal`). */
  refusal?: string;
  toolCalls?: { index: number; id?: string; type?: "function"; function?: { name?: string; arguments?: string } }[];
}

export interface ChatResult {
  /** The reply text; null when the reply is only tool calls or a refusal. */
  content: string | null;
  /**
   * Why the model declined, when it did (OpenAI's `message.refusal`, e.g. for a json_schema it
   * will not fill): the clients' structured-output helpers read it instead of parsing content.
   */
  refusal?: string;
  toolCalls?: ChatToolCall[];
  finishReason: "stop" | "length" | "content_filter" | "tool_calls";
  /** Token counts, when the engine knows them (a streaming upstream may not send them). */
  usage?: { promptTokens: number; completionTokens: number };
  trace?: UpstreamTrace;
}

/** A request an engine cannot serve (e.g. tools for an engine that calls none): the field at fault and why. */
export interface ChatRequestProblem {
  param: string;
  message: string;
  code: string;
}

/** An input an engine cannot take: which one (index into job.images, or the mask) and why. */
export interface InputProblem {
  image: number | "mask";
  message: string;
}

export interface ImageEngine {
  generate(job: ImageJob): Promise<GeneratedImage>;
  edit(job: ImageJob): Promise<GeneratedImage>;
  /**
   * Optional, cheap (headers only): limits the engine knows before it starts, checked before
   * the charge so such a request is a 400 that costs nothing.
   */
  inputProblem?(job: Omit<ImageJob, "signal">, kind: "generate" | "edit"): InputProblem | null;
  /** True when an edit's output always has the first image's size, whatever `size` asks (the playground then offers no Size for edits). */
  readonly editKeepsImageSize?: boolean;
}

export interface ChatEngine {
  chat(job: ChatJob): Promise<ChatResult>;
  /** Optional, cheap: what this engine cannot serve, checked before the request takes a slot (a 400). */
  requestProblem?(job: Omit<ChatJob, "signal" | "onDelta">): ChatRequestProblem | null;
}

/** Base of every engine failure. Deliberately no `code` property (Elysia treats that specially). */
export abstract class EngineError extends Error {
  trace?: Partial<UpstreamTrace>;
}

/** Every usable account is cooling down; retry after the earliest recovery. */
export class UpstreamRateLimited extends EngineError {
  override name = "UpstreamRateLimited";
  constructor(message: string, readonly retryAfterMs: number) {
    super(message);
  }
}

/** No account usable at all (all disabled, or none configured). */
export class UpstreamUnavailable extends EngineError {
  override name = "UpstreamUnavailable";
}

/** Attempts ran out on 5xx, resets, malformed answers. */
export class UpstreamFailed extends EngineError {
  override name = "UpstreamFailed";
}

/** The upstream refused the request itself (HTTP 400: policy, unsupported size): no retry. */
export class UpstreamRejected extends EngineError {
  override name = "UpstreamRejected";
}

/** The engine did not finish within its deadline. */
export class EngineTimeout extends EngineError {
  override name = "EngineTimeout";
}

/** The engine produced something unusable (e.g. bytes that are not a decodable image). */
export class EngineOutputInvalid extends EngineError {
  override name = "EngineOutputInvalid";
}

/** Which engine serves a catalog model (the flows' port; engines/registry implements it). */
export interface EngineLookup {
  imageEngine(model: CatalogModel): ImageEngine | undefined;
  chatEngine(model: CatalogModel): ChatEngine | undefined;
}
