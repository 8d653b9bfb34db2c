/**
 * Fake upstreams for the engine and pool tests: real Bun.serve servers on loopback that speak
 * the OpenAI API or the Stable Diffusion WebUI API, record every request they receive, count
 * concurrent requests per account, and inject faults on demand.
 *
 * Accounts are told apart by their credentials (the Bearer key, or the basic-auth user).
 *
 * Streaming follows the APIs' own documents:
 * - OpenAI: `stream: true` on /v1/images/generations and /v1/images/edits answers
 *   `text/event-stream` with `partial_images` events `image_generation.partial_image` /
 *   `image_edit.partial_image` (b64_json, partial_image_index, size, quality, background,
 *   output_format, created_at) and then `image_generation.completed` / `image_edit.completed`
 *   (the same fields and usage), each as `event: <type>` plus `data: <json>`; a failure is
 *   `event: error` with `{"type":"error","error":{…}}` (developers.openai.com/api/reference/
 *   resources/images/generation-streaming-events and …/edit-streaming-events; openai-node
 *   src/resources/images.ts ImageGenStreamEvent / ImageEditStreamEvent).
 * - Stable Diffusion WebUI: GET /sdapi/v1/progress?skip_current_image=… answers
 *   ProgressResponse {progress, eta_relative, state, current_image, textinfo}: progress 0 and no
 *   image while idle, else the fraction done and the live preview as base64 unless skipped
 *   (AUTOMATIC1111 modules/api/api.py `progressapi`, modules/api/models.py ProgressRequest /
 *   ProgressResponse). Its tasks follow AUTOMATIC1111 1.8+ (modules/api/api.py text2imgapi /
 *   img2imgapi, modules/progress.py, modules/call_queue.py): a generation is registered under
 *   its `force_task_id` (else `task(txt2img-XXXXXXX)`) as queued, waits for the one FIFO queue
 *   lock, becomes the current task, and is remembered among the last 16 finished; it runs on
 *   whether or not its client is still there. POST /internal/progress {id_task} answers that
 *   task's {active, queued, completed, …} (modules/progress.py `progressapi`), or 404 when
 *   switched off (a WebUI started with --nowebui); POST /sdapi/v1/interrupt stops the current
 *   task, whoever sent it, and answers {}.
 */
import type { Server } from "bun";
import { makePng } from "./images";

export type Fault =
  /**
   * A 429. The Gemini fake answers it as Gemini does (startFakeGemini): the delay is `retryDelay`
   * in the body's RetryInfo (any JSON value, so a test can send a malformed one; no RetryInfo
   * when absent), and the headers come only when named, as a proxy in front might add them.
   */
  | { kind: "429"; retryAfter?: string; retryAfterMs?: string; retryDelay?: unknown }
  | { kind: "status"; status: number; message?: string }
  | { kind: "hang" }
  | { kind: "malformed" }
  /** A 200 answer that is JSON but not a chat completion (no choices). */
  | { kind: "not-chat" }
  | { kind: "reset" }
  | { kind: "not-image" }
  | { kind: "url" }
  | { kind: "delay"; ms: number }
  /** A streamed image request: one partial image, then `event: error` (OpenAI fake). */
  | { kind: "stream-error"; message?: string }
  /**
   * A 200 answer of the fake's named kind (Gemini fake: "safety", "blocked", "no-image"; OpenAI
   * fake's chat: "no-usage", "huge-chunk", "empty-call-id", "refusal" with the refusal text as `message`).
   */
  | { kind: "variant"; name: string; message?: string };

export interface ReceivedPart {
  name: string;
  filename: string | null;
  type: string;
  bytes: Uint8Array;
}

export interface Received {
  method: string;
  path: string;
  account: string;
  authorization: string | null;
  /** The `x-goog-api-key` header (Gemini), when sent. */
  googApiKey?: string | null;
  json?: Record<string, unknown>;
  fields?: Record<string, string[]>;
  files?: ReceivedPart[];
}

export interface FakeUpstream {
  url: string;
  received: Received[];
  /** Highest number of concurrent requests each account saw. */
  maxConcurrent: Map<string, number>;
  /** The next requests of `account` get these faults, in order; then normal answers. */
  queueFaults(account: string, ...faults: Fault[]): void;
  /** Every request of `account` gets this fault until cleared (undefined clears). */
  alwaysFault(account: string, fault: Fault | undefined): void;
  /** Every successful answer first waits this long (for burst tests). */
  setLatency(ms: number): void;
  /** The revised_prompt the OpenAI fake answers with (undefined: none). */
  setRevisedPrompt(text: string | undefined): void;
  reset(): void;
  stop(): Promise<void>;
}

/**
 * How the OpenAI fake answers `stream: true`: server-sent events ("sse", the default), one JSON
 * answer as if it did not know the field ("json"), or a 400 refusing the field ("reject").
 */
export type StreamMode = "sse" | "json" | "reject";

export interface FakeOpenAI extends FakeUpstream {
  setStreamMode(mode: StreamMode): void;
  /** Pause between streamed events (default 0). */
  setEventGapMs(ms: number): void;
  /** Streamed chat answers whose reader went away before the stream ended. */
  readonly chatStreamsAbandoned: number;
}

export interface FakeWebUI extends FakeUpstream {
  /**
   * With n > 0 a generation answers only after /sdapi/v1/progress has been polled n times while
   * it runs (or after 5 s), poll i reporting progress i/n with a preview; 0 (the default)
   * answers at once.
   */
  setProgressSteps(n: number): void;
  /** Progress polls received while a generation ran, with their skip_current_image value. */
  progressPolls: { skipCurrentImage: boolean; progress: number }[];
  /**
   * On: generations that start from now on run until interrupted or finishRunning() (at most
   * 10 s), as a long generation does. Off (the default): as setProgressSteps says.
   */
  holdGenerations(on: boolean): void;
  /** Ends the running generation normally (a held one included). */
  finishRunning(): void;
  /** A finished generation's answer waits this long before it is sent (the work is done, the answer late). */
  setAnswerDelay(ms: number): void;
  /** Off: POST /internal/progress answers 404, as a WebUI started with --nowebui does (default on). */
  setTaskProgress(on: boolean): void;
  /**
   * Off: as before 1.8.0, the API ignores `force_task_id` and registers its generations as no
   * task at all (only the browser UI's had ids), so /internal/progress knows none of them.
   */
  setApiTaskIds(on: boolean): void;
  /** Every generation received, in arrival order, with its task id and where it is now. */
  tasks: FakeWebUiTask[];
  /** Each POST /sdapi/v1/interrupt, with the task it stopped (null when none ran). */
  interrupts: { stopped: string | null }[];
  /** Each POST /internal/progress: the task asked about and the state answered. */
  taskQueries: { idTask: unknown; answered: { active: boolean; queued: boolean; completed: boolean } | null }[];
}

export interface FakeWebUiTask {
  id: string;
  state: "queued" | "running" | "finished" | "interrupted";
}

interface Behaviour {
  /** The revised_prompt an OpenAI fake adds to image answers. */
  revised?: string;
  answer(req: Received, request: Request, origin: string): Response | Promise<Response>;
  /** Back to the defaults (reset()). */
  resetBehaviour?(): void;
  /** The fake's own 429 (a `429` fault), for an upstream whose 429 is not OpenAI's. */
  rateLimited?(fault: Extract<Fault, { kind: "429" }>, req: Received): Response;
}

function accountOf(authorization: string | null): string {
  if (!authorization) return "(none)";
  const bearer = /^Bearer\s+(.+)$/i.exec(authorization);
  if (bearer) return bearer[1]!;
  const basic = /^Basic\s+(.+)$/i.exec(authorization);
  if (basic) return Buffer.from(basic[1]!, "base64").toString("utf8").split(":")[0]!;
  return authorization;
}

function startFake(behaviour: Behaviour): FakeUpstream {
  const received: Received[] = [];
  const inFlight = new Map<string, number>();
  const maxConcurrent = new Map<string, number>();
  const queued = new Map<string, Fault[]>();
  const always = new Map<string, Fault>();
  let latency = 0;
  const hanging = new Set<() => void>();

  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 30,
    async fetch(request) {
      const url = new URL(request.url);
      if (url.pathname.startsWith("/files/")) return behaviour.answer({ method: "GET", path: url.pathname, account: "(download)", authorization: null }, request, url.origin);
      const authorization = request.headers.get("authorization");
      const googApiKey = request.headers.get("x-goog-api-key");
      const account = googApiKey ?? accountOf(authorization);
      const rec: Received = { method: request.method, path: url.pathname + (url.search ? `?${url.searchParams.toString()}` : ""), account, authorization, googApiKey };
      const type = request.headers.get("content-type") ?? "";
      if (type.includes("multipart/form-data")) {
        const form = await request.formData();
        rec.fields = {};
        rec.files = [];
        for (const [name, value] of form.entries() as Iterable<[string, string | File]>) {
          if (typeof value === "string") (rec.fields[name] ??= []).push(value);
          else rec.files.push({ name, filename: value.name ?? null, type: value.type, bytes: new Uint8Array(await value.arrayBuffer()) });
        }
      } else if (request.method === "POST") {
        // A POST may have no body at all (the WebUI's /sdapi/v1/interrupt takes none).
        const text = await request.text();
        if (text !== "") rec.json = JSON.parse(text) as Record<string, unknown>;
      }
      received.push(rec);
      const now = (inFlight.get(account) ?? 0) + 1;
      inFlight.set(account, now);
      maxConcurrent.set(account, Math.max(maxConcurrent.get(account) ?? 0, now));
      try {
        const q = queued.get(account);
        const fault = q && q.length > 0 ? q.shift() : always.get(account);
        if (fault?.kind === "delay") await Bun.sleep(fault.ms);
        else if (fault) return await faultResponse(fault, request, url.origin, rec);
        if (latency > 0) await Bun.sleep(latency);
        return await behaviour.answer(rec, request, url.origin);
      } finally {
        inFlight.set(account, (inFlight.get(account) ?? 1) - 1);
      }
    },
  });

  async function faultResponse(fault: Fault, request: Request, origin: string, rec: Received): Promise<Response> {
    switch (fault.kind) {
      case "429": {
        if (behaviour.rateLimited) return behaviour.rateLimited(fault, rec);
        const headers: Record<string, string> = { "content-type": "application/json" };
        if (fault.retryAfter) headers["retry-after"] = fault.retryAfter;
        if (fault.retryAfterMs) headers["retry-after-ms"] = fault.retryAfterMs;
        return new Response(JSON.stringify({ error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" } }), { status: 429, headers });
      }
      case "status":
        return Response.json({ error: { message: fault.message ?? `fake error ${fault.status}`, type: "invalid_request_error", code: null } }, { status: fault.status });
      case "hang":
        // Answers only when the client gives up (or after 10 s, so a broken test cannot leak forever).
        await new Promise<void>((resolve) => {
          const done = () => {
            hanging.delete(done);
            resolve();
          };
          hanging.add(done);
          request.signal.addEventListener("abort", done, { once: true });
          setTimeout(done, 10_000);
        });
        return new Response("too late", { status: 504 });
      case "malformed":
        return new Response('{"data": [{"b64_json": "iVBOR', { status: 200, headers: { "content-type": "application/json" } });
      case "not-chat":
        return Response.json({ id: "chatcmpl-empty", object: "chat.completion", created: 1, choices: [] });
      case "reset": {
        // Headers promise a body that never fully arrives: the connection is torn down mid-answer.
        const body = new ReadableStream<Uint8Array>({
          start(c) {
            c.enqueue(new TextEncoder().encode('{"data":['));
            setTimeout(() => c.error(new Error("fake connection reset")), 2);
          },
        });
        return new Response(body, { status: 200, headers: { "content-type": "application/json", "content-length": "4096" } });
      }
      case "not-image":
        return behaviour.answer({ ...rec, path: `${rec.path}#not-image` }, request, origin);
      case "url":
        return behaviour.answer({ ...rec, path: `${rec.path}#url` }, request, origin);
      case "delay":
        return behaviour.answer(rec, request, origin);
      case "stream-error":
        return behaviour.answer({ ...rec, path: `${rec.path}#stream-error:${fault.message ?? "the fake upstream failed mid-stream"}` }, request, origin);
      case "variant":
        return behaviour.answer({ ...rec, path: `${rec.path}#${fault.name}:${fault.message ?? ""}` }, request, origin);
    }
  }

  return {
    url: `http://127.0.0.1:${server.port}`,
    received,
    maxConcurrent,
    queueFaults: (account, ...faults) => queued.set(account, [...(queued.get(account) ?? []), ...faults]),
    alwaysFault: (account, fault) => (fault ? always.set(account, fault) : always.delete(account)),
    setLatency: (ms) => {
      latency = ms;
    },
    setRevisedPrompt: (text) => {
      behaviour.revised = text;
    },
    reset() {
      received.length = 0;
      maxConcurrent.clear();
      queued.clear();
      always.clear();
      latency = 0;
      behaviour.revised = undefined;
      behaviour.resetBehaviour?.();
    },
    async stop() {
      for (const h of [...hanging]) h();
      await server.stop(true);
    },
  };
}

function sizeOf(value: unknown, fallback = 32): { width: number; height: number } {
  const m = typeof value === "string" ? /^(\d+)x(\d+)$/.exec(value) : null;
  return m ? { width: Number(m[1]), height: Number(m[2]) } : { width: fallback, height: fallback };
}

/** An OpenAI-compatible fake under /v1 (chat completions, image generations and edits, streamed or not). */
export function startFakeOpenAI(): FakeOpenAI {
  const downloads = new Map<string, Uint8Array>();
  let n = 0;
  let streamMode: StreamMode = "sse";
  let eventGapMs = 0;
  let chatStreamsAbandoned = 0;
  const behaviour: Behaviour = {
    answer(req, _request, origin) {
      if (req.path.startsWith("/files/")) {
        const bytes = downloads.get(req.path);
        return bytes ? new Response(bytes as Uint8Array<ArrayBuffer>, { headers: { "content-type": "image/png" } }) : new Response("gone", { status: 404 });
      }
      const [path, variant] = req.path.split("#");
      // What `atelier doctor` calls to check an account's key.
      if (path === "/v1/models") return Response.json({ object: "list", data: [{ id: "gpt-image-1", object: "model", created: 1, owned_by: "fake" }] });
      if (path === "/v1/chat/completions") {
        const reply = fakeChatReply(req.json ?? {}, ++n);
        // "refusal:<text>": the model declines, as OpenAI answers it (content null, message.refusal; streamed as delta.refusal).
        if (variant?.startsWith("refusal:")) Object.assign(reply, { content: null, toolCalls: undefined, refusal: variant.slice("refusal:".length), finishReason: "stop" });
        // "empty-call-id": tool calls whose id is "" (some OpenAI-compatible servers send that).
        if (variant?.startsWith("empty-call-id")) for (const call of reply.toolCalls ?? []) call.id = "";
        // streamMode "json": an upstream that ignores `stream` and answers one JSON document.
        if (req.json?.stream === true && streamMode !== "json") {
          const failure = variant?.startsWith("stream-error:") ? variant.slice("stream-error:".length) : undefined;
          const usage = !variant?.startsWith("no-usage");
          // "huge-chunk": one content chunk of 1.5 MiB, beyond what a streamed chat chunk may be.
          if (variant?.startsWith("huge-chunk")) reply.content = "z".repeat(1536 * 1024);
          return streamedChat(reply, req.json, _request, { gapMs: eventGapMs, failure, usage, abandoned: () => chatStreamsAbandoned++ });
        }
        return Response.json({
          id: "chatcmpl-fake",
          object: "chat.completion",
          created: 1,
          model: String(req.json?.model),
          choices: [{ index: 0, message: { role: "assistant", content: reply.content, refusal: reply.refusal ?? null, ...(reply.toolCalls ? { tool_calls: reply.toolCalls } : {}) }, finish_reason: reply.finishReason }],
          usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
        });
      }
      if (path === "/v1/images/generations" || path === "/v1/images/edits") {
        const field = (name: string) => req.json?.[name] ?? req.fields?.[name]?.[0];
        const size = sizeOf(field("size"));
        const png = makePng(size.width, size.height, (x, y) => [x % 256, y % 256, 99, 255]);
        const streamed = field("stream") === true || field("stream") === "true";
        if (streamed && streamMode === "reject") {
          return Response.json({ error: { message: "Unknown parameter: 'stream'.", type: "invalid_request_error", param: "stream", code: "unknown_parameter" } }, { status: 400 });
        }
        if (streamed && streamMode === "sse") {
          const partials = Number(field("partial_images") ?? 0);
          const failure = variant?.startsWith("stream-error:") ? variant.slice("stream-error:".length) : undefined;
          return streamedImage(path.endsWith("generations") ? "image_generation" : "image_edit", size, partials, png, eventGapMs, failure);
        }
        const item: Record<string, unknown> = {};
        if (variant === "not-image") item.b64_json = Buffer.from("this is not an image at all").toString("base64");
        else if (variant === "url") {
          const file = `/files/${++n}.png`;
          downloads.set(file, png);
          item.url = `${origin}${file}`;
        } else item.b64_json = Buffer.from(png).toString("base64");
        if (behaviour.revised !== undefined) item.revised_prompt = behaviour.revised;
        return Response.json({ created: 1, data: [item], usage: FAKE_IMAGE_USAGE });
      }
      return Response.json({ error: { message: `no route ${req.path}` } }, { status: 404 });
    },
    resetBehaviour() {
      streamMode = "sse";
      eventGapMs = 0;
    },
  };
  return {
    ...startFake(behaviour),
    setStreamMode: (mode) => {
      streamMode = mode;
    },
    setEventGapMs: (ms) => {
      eventGapMs = ms;
    },
    get chatStreamsAbandoned() {
      return chatStreamsAbandoned;
    },
  };
}

interface FakeChatReply {
  content: string | null;
  refusal?: string;
  toolCalls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  finishReason: "stop" | "tool_calls";
}

/**
 * The OpenAI fake's chat reply: with `tools` (and the last message not a tool's answer) it
 * calls the function `tool_choice` names, else the first tool, with {"query": <last message>};
 * otherwise it echoes the last message's content.
 */
function fakeChatReply(json: Record<string, unknown>, n: number): FakeChatReply {
  const messages = (json.messages as { role: string; content: unknown }[] | undefined) ?? [];
  const last = messages.at(-1);
  const text = typeof last?.content === "string" ? last.content : JSON.stringify(last?.content ?? "");
  const tools = (json.tools as { function: { name: string } }[] | undefined) ?? [];
  if (tools.length > 0 && last?.role !== "tool" && json.tool_choice !== "none") {
    const choice = json.tool_choice as { function?: { name?: string } } | undefined;
    const name = choice?.function?.name ?? tools[0]!.function.name;
    return { content: null, toolCalls: [{ id: `call_fake_${n}`, type: "function", function: { name, arguments: JSON.stringify({ query: text }) } }], finishReason: "tool_calls" };
  }
  return { content: `echo: ${text}`, finishReason: "stop" };
}

/**
 * A streamed chat answer as OpenAI sends it: `data: <chat.completion.chunk>` lines (the role
 * first, the content (or a refusal, as delta.refusal) in pieces of 4 characters or the tool
 * call as a name and then argument fragments, the finish reason), a usage chunk when stream_options.include_usage, then
 * `data: [DONE]`. With `failure` it sends two pieces and then `data: {"error": …}` and ends;
 * without `usage` (the fault variant "no-usage") it leaves the usage chunk out.
 */
function streamedChat(
  reply: FakeChatReply,
  json: Record<string, unknown>,
  request: Request,
  opts: { gapMs: number; failure: string | undefined; usage: boolean; abandoned: () => void },
): Response {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) =>
    ({ id: "chatcmpl-fake", object: "chat.completion.chunk", created: 1, model: String(json.model), choices: [{ index: 0, delta, finish_reason: finish }], ...extra });
  const chunks: unknown[] = [chunk(reply.refusal === undefined ? { role: "assistant", content: "" } : { role: "assistant", content: null, refusal: "" })];
  if (reply.refusal !== undefined) {
    for (let i = 0; i < reply.refusal.length; i += 4) chunks.push(chunk({ refusal: reply.refusal.slice(i, i + 4) }));
  } else if (reply.toolCalls) {
    reply.toolCalls.forEach((call, index) => {
      chunks.push(chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }] }));
      for (let i = 0; i < call.function.arguments.length; i += 5) chunks.push(chunk({ tool_calls: [{ index, function: { arguments: call.function.arguments.slice(i, i + 5) } }] }));
    });
  } else {
    const text = reply.content ?? "";
    const piece = text.length > 1024 * 1024 ? text.length : 4;
    for (let i = 0; i < text.length; i += piece) chunks.push(chunk({ content: text.slice(i, i + piece) }));
  }
  chunks.push(chunk({}, reply.finishReason));
  const options = json.stream_options as { include_usage?: boolean } | undefined;
  if (options?.include_usage && opts.usage) chunks.push({ ...chunk({}), choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } });
  const lines = opts.failure === undefined ? [...chunks.map((c) => JSON.stringify(c)), "[DONE]"] : [...chunks.slice(0, 3).map((c) => JSON.stringify(c)), JSON.stringify({ error: { message: opts.failure, type: "server_error", code: null } })];
  const encoder = new TextEncoder();
  let finished = false;
  let gone = false;
  const leave = () => {
    if (!finished && !gone) {
      gone = true;
      opts.abandoned();
    }
  };
  request.signal.addEventListener("abort", leave, { once: true });
  const body = new ReadableStream<Uint8Array>({
    async start(c) {
      for (const line of lines) {
        if (gone) return;
        try {
          c.enqueue(encoder.encode(`data: ${line}\n\n`));
        } catch {
          return leave();
        }
        if (opts.gapMs > 0) await Bun.sleep(opts.gapMs);
      }
      finished = true;
      c.close();
    },
    cancel: leave,
  });
  return new Response(body, { headers: { "content-type": "text/event-stream" } });
}

/** The usage the OpenAI fake reports with every image (its JSON answers and its completed events), as gpt-image-1 does. */
export const FAKE_IMAGE_USAGE = { total_tokens: 100, input_tokens: 50, output_tokens: 50, input_tokens_details: { text_tokens: 10, image_tokens: 40 } };

/** The colour of the fake's k-th partial image (the final image is a gradient). */
export const FAKE_PARTIAL_COLOR = (k: number): [number, number, number, number] => [40 * (k + 1), 10, 200, 255];

/** OpenAI's image streaming events: `partials` partial images, then the completed image (or an error event). */
function streamedImage(prefix: "image_generation" | "image_edit", size: { width: number; height: number }, partials: number, png: Uint8Array, gapMs: number, failure: string | undefined): Response {
  const common = { size: `${size.width}x${size.height}`, quality: "medium", background: "opaque", output_format: "png", created_at: 1 };
  const frames: string[] = [];
  const event = (type: string, data: unknown) => frames.push(`event: ${type}\ndata: ${JSON.stringify(data)}\n\n`);
  for (let k = 0; k < (failure ? 1 : partials); k++) {
    const partial = makePng(size.width, size.height, () => FAKE_PARTIAL_COLOR(k));
    event(`${prefix}.partial_image`, { type: `${prefix}.partial_image`, b64_json: Buffer.from(partial).toString("base64"), partial_image_index: k, ...common });
  }
  if (failure) event("error", { type: "error", error: { message: failure, type: "server_error", param: null, code: null } });
  else {
    event(`${prefix}.completed`, { type: `${prefix}.completed`, b64_json: Buffer.from(png).toString("base64"), ...common, usage: FAKE_IMAGE_USAGE });
  }
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      for (const frame of frames) {
        if (gapMs > 0) await Bun.sleep(gapMs);
        // Split each frame in two so a reader must join lines across chunks.
        const cut = Math.floor(frame.length / 2);
        controller.enqueue(encoder.encode(frame.slice(0, cut)));
        controller.enqueue(encoder.encode(frame.slice(cut)));
      }
      controller.close();
    },
  });
  return new Response(body, { headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
}

/** A Stable Diffusion WebUI fake (/sdapi/v1/txt2img, /sdapi/v1/img2img, /sdapi/v1/progress, /internal/progress, /sdapi/v1/interrupt). */
export function startFakeWebUI(): FakeWebUI {
  let steps = 0;
  let holding = false;
  let answerDelayMs = 0;
  let taskProgress = true;
  let apiTaskIds = true;
  interface Job extends FakeWebUiTask {
    polls: number;
    size: { width: number; height: number };
    held: boolean;
    /** Ended early: interrupted, finishRunning(), or the fake reset. */
    ended: boolean;
  }
  const tasks: Job[] = [];
  const interrupts: FakeWebUI["interrupts"] = [];
  const taskQueries: FakeWebUI["taskQueries"] = [];
  const progressPolls: FakeWebUI["progressPolls"] = [];
  /** The generation running now (what /sdapi/v1/progress reports and /sdapi/v1/interrupt stops). */
  let current: Job | null = null;
  /** modules/progress.py: current_task, pending_tasks, finished_tasks (the last 16). */
  let currentTask: string | null = null;
  const pending = new Set<string>();
  const finished: string[] = [];
  /** modules/call_queue.py queue_lock: one generation at a time, first come first served. */
  let queueLock: Promise<void> = Promise.resolve();
  const endAll = () => {
    for (const t of tasks) t.ended = true;
  };

  const generate = async (req: Received, path: string, variant: string | undefined): Promise<Response> => {
    const w = Number(req.json?.width ?? 64);
    const h = Number(req.json?.height ?? 64);
    const forced = req.json?.force_task_id;
    const kind = path.endsWith("txt2img") ? "txt2img" : "img2img";
    const id = typeof forced === "string" && forced !== "" ? forced : `task(${kind}-${Math.random().toString(36).slice(2, 9).toUpperCase()})`;
    const job: Job = { id, state: "queued", polls: 0, size: { width: w, height: h }, held: false, ended: false };
    tasks.push(job);
    const registered = apiTaskIds;
    if (registered) pending.add(id);
    const turn = queueLock;
    let release!: () => void;
    queueLock = new Promise((r) => (release = r));
    await turn;
    try {
      if (registered) {
        pending.delete(id);
        currentTask = id;
      }
      current = job;
      job.state = "running";
      job.held = holding;
      const started = Date.now();
      const limit = job.held ? 10_000 : 5_000;
      while (!job.ended && Date.now() - started < limit && (job.held || job.polls < steps)) await Bun.sleep(5);
      if (job.state === "running") job.state = "finished";
      if (registered) {
        finished.push(id);
        if (finished.length > 16) finished.shift();
        if (currentTask === id) currentTask = null;
      }
      if (current === job) current = null;
    } finally {
      release();
    }
    if (answerDelayMs > 0) await Bun.sleep(answerDelayMs);
    const image = variant === "not-image" ? Buffer.from("garbage").toString("base64") : Buffer.from(makePng(w, h, () => [10, 200, 30, 255])).toString("base64");
    return Response.json({ images: [image], parameters: {}, info: "{}" });
  };

  const behaviour: Behaviour = {
    async answer(req) {
      const [path, variant] = req.path.split("#");
      if (path?.startsWith("/sdapi/v1/progress")) {
        const skip = new URLSearchParams(path.split("?")[1] ?? "").get("skip_current_image") === "true";
        const running = current;
        if (!running) return Response.json({ progress: 0, eta_relative: 0, state: { job_count: 0 }, current_image: null, textinfo: null });
        running.polls++;
        const progress = steps > 0 ? Math.min(1, running.polls / steps) : 0.5;
        progressPolls.push({ skipCurrentImage: skip, progress });
        const { width, height } = running.size;
        const preview = skip ? null : Buffer.from(makePng(width, height, () => [Math.round(progress * 250), 120, 60, 255])).toString("base64");
        return Response.json({ progress, eta_relative: 1, state: { job_count: 1, sampling_step: running.polls, sampling_steps: steps }, current_image: preview, textinfo: null });
      }
      if (path === "/internal/progress") {
        const idTask = req.json?.id_task;
        if (!taskProgress) {
          taskQueries.push({ idTask, answered: null });
          return Response.json({ detail: "Not Found" }, { status: 404 });
        }
        const active = currentTask !== null && idTask === currentTask;
        const queued = typeof idTask === "string" && pending.has(idTask);
        const completed = typeof idTask === "string" && finished.includes(idTask);
        taskQueries.push({ idTask, answered: { active, queued, completed } });
        if (!active) {
          const textinfo = queued ? `In queue: ${[...pending].indexOf(idTask as string) + 1}/${pending.size}` : "Waiting...";
          return Response.json({ active, queued, completed, progress: null, eta: null, live_preview: null, id_live_preview: -1, textinfo });
        }
        const progress = steps > 0 ? Math.min(1, (current?.polls ?? 0) / steps) : 0.5;
        return Response.json({ active, queued, completed, progress, eta: 1, live_preview: null, id_live_preview: req.json?.id_live_preview ?? -1, textinfo: null });
      }
      if (path === "/sdapi/v1/interrupt") {
        interrupts.push({ stopped: current?.id ?? null });
        if (current) {
          current.state = "interrupted";
          current.ended = true;
        }
        return Response.json({});
      }
      if (path === "/sdapi/v1/txt2img" || path === "/sdapi/v1/img2img") return generate(req, path, variant);
      return Response.json({ detail: "Not Found" }, { status: 404 });
    },
    resetBehaviour() {
      endAll();
      steps = 0;
      holding = false;
      answerDelayMs = 0;
      taskProgress = true;
      apiTaskIds = true;
      tasks.length = 0;
      interrupts.length = 0;
      taskQueries.length = 0;
      progressPolls.length = 0;
    },
  };
  const base = startFake(behaviour);
  return {
    ...base,
    progressPolls,
    tasks,
    interrupts,
    taskQueries,
    setProgressSteps: (n) => {
      steps = n;
    },
    holdGenerations: (on) => {
      holding = on;
    },
    finishRunning: () => {
      if (current) current.ended = true;
    },
    setAnswerDelay: (ms) => {
      answerDelayMs = ms;
    },
    setTaskProgress: (on) => {
      taskProgress = on;
    },
    setApiTaskIds: (on) => {
      apiTaskIds = on;
    },
    stop: async () => {
      endAll();
      await base.stop();
    },
  };
}

/**
 * A Gemini API fake: `POST /v1beta/models/{model}:generateContent` as the image models
 * ("Nano Banana") answer it, after ai.google.dev/gemini-api/docs/image-generation and
 * ai.google.dev/api/generate-content. It checks what we send and answers 400 INVALID_ARGUMENT
 * (Google's error shape) when the request is not what those pages describe: the key in
 * `x-goog-api-key` (else 403 PERMISSION_DENIED), `contents[0].parts` a text part and then
 * `inline_data` {mime_type, data} parts, `generationConfig.responseModalities` including IMAGE,
 * `imageConfig.aspectRatio` one of the documented ten and `imageSize` 1K/2K/4K when present.
 *
 * The image it answers (a `inlineData` part, camelCase as the REST API answers) is small but
 * has the requested aspect ratio: 16·a × 16·b for a:b (times 2 for 2K, 4 for 4K); without an
 * imageConfig it has the first input image's size, else 64x64. The revised prompt, when set,
 * comes as a text part before the image. Variants (fault `variant`): "safety" (a candidate with
 * finishReason IMAGE_SAFETY and no image), "blocked" (promptFeedback.blockReason SAFETY, no
 * candidates), "no-image" (a 200 with a text part only, finishReason STOP).
 *
 * A `429` fault is answered as the Gemini API answers an exhausted quota: 429 RESOURCE_EXHAUSTED
 * with no Retry-After header, the delay only in the body, as a google.rpc.RetryInfo detail whose
 * `retryDelay` is a protobuf Duration in its JSON form ("37s", "1.5s"), next to Help and
 * QuotaFailure details and a message that repeats it in words (the shape Gemini answers in
 * google-gemini/gemini-cli#8437 and googleapis/python-genai#2044; gemini-cli's
 * packages/core/src/utils/googleQuotaErrors.ts reads it there).
 */
export function startFakeGemini(): FakeUpstream {
  const RATIOS = new Set(["1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"]);
  const TIERS: Record<string, number> = { "1K": 1, "2K": 2, "4K": 4 };
  const invalid = (message: string) => Response.json({ error: { code: 400, message, status: "INVALID_ARGUMENT" } }, { status: 400 });
  const behaviour: Behaviour = {
    rateLimited(fault, req) {
      const model = /^\/v1beta\/models\/([^/:]+):/.exec(req.path)?.[1] ?? "unknown";
      const details: Record<string, unknown>[] = [
        { "@type": "type.googleapis.com/google.rpc.Help", links: [{ description: "Learn more about Gemini API quotas", url: "https://ai.google.dev/gemini-api/docs/rate-limits" }] },
        {
          "@type": "type.googleapis.com/google.rpc.QuotaFailure",
          violations: [
            {
              quotaMetric: "generativelanguage.googleapis.com/generate_content_free_tier_requests",
              quotaId: "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
              quotaDimensions: { location: "global", model },
              quotaValue: "10",
            },
          ],
        },
      ];
      if (fault.retryDelay !== undefined) details.push({ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: fault.retryDelay });
      const retryIn = typeof fault.retryDelay === "string" ? `\nPlease retry in ${fault.retryDelay}.` : "";
      const message = `You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, model: ${model}${retryIn}`;
      const headers: Record<string, string> = { "content-type": "application/json; charset=UTF-8" };
      if (fault.retryAfter) headers["retry-after"] = fault.retryAfter;
      if (fault.retryAfterMs) headers["retry-after-ms"] = fault.retryAfterMs;
      return new Response(JSON.stringify({ error: { code: 429, message, status: "RESOURCE_EXHAUSTED", details } }), { status: 429, headers });
    },
    answer(req) {
      const [path, variant] = req.path.split("#");
      const route = /^\/v1beta\/models\/([^/:]+):generateContent$/.exec(path ?? "");
      if (!route || req.method !== "POST") return Response.json({ error: { code: 404, message: `no route ${req.path}`, status: "NOT_FOUND" } }, { status: 404 });
      if (!req.googApiKey) return Response.json({ error: { code: 403, message: "Method doesn't allow unregistered callers. Please use API Key.", status: "PERMISSION_DENIED" } }, { status: 403 });
      const body = req.json ?? {};
      const contents = body.contents as { parts?: Record<string, unknown>[] }[] | undefined;
      const parts = contents?.[0]?.parts;
      if (!Array.isArray(parts) || typeof parts[0]?.text !== "string") return invalid("contents[0].parts[0] must be the text prompt");
      const images: { width: number; height: number }[] = [];
      for (const part of parts.slice(1)) {
        const inline = part.inline_data as { mime_type?: unknown; data?: unknown } | undefined;
        if (!inline || typeof inline.data !== "string" || !["image/png", "image/jpeg", "image/webp"].includes(String(inline.mime_type))) return invalid("each image must be an inline_data part with mime_type and data");
        const bytes = Buffer.from(inline.data, "base64");
        images.push(bytes.length >= 24 && bytes[0] === 0x89 ? { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) } : { width: 64, height: 64 });
      }
      const config = body.generationConfig as { responseModalities?: unknown; imageConfig?: { aspectRatio?: unknown; imageSize?: unknown } } | undefined;
      if (!Array.isArray(config?.responseModalities) || !config.responseModalities.includes("IMAGE")) return invalid("generationConfig.responseModalities must include IMAGE for an image");
      const imageConfig = config.imageConfig;
      if (imageConfig !== undefined) {
        if (!RATIOS.has(String(imageConfig.aspectRatio))) return invalid(`unsupported aspectRatio ${String(imageConfig.aspectRatio)}`);
        if (imageConfig.imageSize !== undefined && !(String(imageConfig.imageSize) in TIERS)) return invalid(`unsupported imageSize ${String(imageConfig.imageSize)}`);
      }
      const [name, message] = (variant ?? "").split(/:(.*)/s);
      if (name === "blocked") return Response.json({ promptFeedback: { blockReason: "SAFETY", ...(message ? { blockReasonMessage: message } : {}) }, modelVersion: route[1] });
      if (name === "safety") {
        return Response.json({ candidates: [{ content: { role: "model", parts: [] }, finishReason: "IMAGE_SAFETY", ...(message ? { finishMessage: message } : {}), index: 0 }], modelVersion: route[1] });
      }
      if (name === "no-image") return Response.json({ candidates: [{ content: { role: "model", parts: [{ text: "I can only describe it." }] }, finishReason: "STOP", index: 0 }], modelVersion: route[1] });
      let size = images[0] ?? { width: 64, height: 64 };
      if (imageConfig) {
        const [a, b] = String(imageConfig.aspectRatio).split(":").map(Number) as [number, number];
        const tier = TIERS[String(imageConfig.imageSize ?? "1K")]!;
        size = { width: 16 * a * tier, height: 16 * b * tier };
      }
      const png = makePng(size.width, size.height, (x, y) => [x % 256, y % 256, 180, 255]);
      const out: Record<string, unknown>[] = [];
      if (behaviour.revised !== undefined) out.push({ text: behaviour.revised });
      out.push({ inlineData: { mimeType: "image/png", data: Buffer.from(png).toString("base64") } });
      return Response.json({
        candidates: [{ content: { role: "model", parts: out }, finishReason: "STOP", index: 0 }],
        usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 1290, totalTokenCount: 1300 },
        modelVersion: route[1],
      });
    },
  };
  return startFake(behaviour);
}

/*
 * Queue API fakes (fal, Replicate, Black Forest Labs), each a loopback server that checks the
 * credential header, records what we send, runs each job through a few pending polls and
 * serves the result image itself (so downloads stay on loopback). Following the APIs' docs:
 * - fal (docs.fal.ai, Queue): POST /{app} answers request_id, status_url, response_url,
 *   cancel_url; GET …/requests/{id}/status answers IN_QUEUE, IN_PROGRESS, COMPLETED (the only
 *   three: a failed or refused job is COMPLETED too); GET …/requests/{id} answers
 *   { images: [{ url, width, height, content_type }] }, or the job's error with its status:
 *   a model error (docs.fal.ai/errors) as 422 { detail: [{ loc, msg, type, url, input }] } with
 *   `X-Fal-Retryable: false` (a moderated job: type content_policy_violation), a request error
 *   (…/model-apis/request-errors) as { detail, error_type } and `X-Fal-Error-Type`: 500
 *   runner_server_error for a failed job, 499 client_cancelled for a cancelled one;
 *   PUT …/requests/{id}/cancel answers 202 CANCELLATION_REQUESTED, or 400 ALREADY_COMPLETED.
 *   `Authorization: Key <key>`.
 * - Replicate (replicate.com/docs/reference/http): POST /v1/models/{owner}/{name}/predictions
 *   ({input}) or /v1/predictions ({version, input}), `Prefer: wait=n` may answer the finished
 *   prediction; a prediction is { id, status, output, error, urls: { get, cancel, stream } }
 *   with status starting → processing → succeeded | failed | canceled; POST urls.cancel.
 *   `Authorization: Bearer <key>`. With setSyncDataUris, a prediction finished within
 *   `Prefer: wait` answers its output as a data URI instead of an HTTP URL, as Replicate's sync
 *   mode may (replicate.com/changelog/2024-10-09-synchronous-api).
 * - Black Forest Labs (docs.bfl.ai): POST /v1/{model} with `x-key` answers { id, polling_url };
 *   GET polling_url answers { id, status: "Pending" | "Ready" | "Request Moderated" |
 *   "Content Moderated" | "Error", result: { sample } }; no cancel endpoint.
 */
export type QueueFakeKind = "fal" | "replicate" | "bfl";
/** How the next job ends: an image, a failed or canceled job, a moderated one, or never. */
export type QueueJobEnd = "ok" | "failed" | "canceled" | "moderated" | "never";

/** A status poll or result fetch that goes wrong: a status (with its body and Retry-After), or a connection torn down mid-answer. */
export type QueueReadFault = { status: number; retryAfter?: string; body?: string } | { kind: "reset" };

export interface QueueReceived {
  method: string;
  path: string;
  account: string;
  authorization: string | null;
  xKey: string | null;
  prefer: string | null;
  json?: Record<string, unknown>;
}

export interface FakeQueue {
  url: string;
  received: QueueReceived[];
  /** Ids of jobs whose cancel endpoint was called. */
  cancels: string[];
  /** Pending polls before a job ends (default 2). */
  setPendingPolls(n: number): void;
  /** Replicate: a prediction finished within `Prefer: wait` has a data URI as its output (default off). */
  setSyncDataUris(on: boolean): void;
  /**
   * Replicate: a submit with `Prefer: wait=n` answers after this long (at most n seconds; default
   * 0, at once), as Replicate holds it while the prediction runs; the prediction exists from the
   * submit's arrival and goes on if the client hangs up meanwhile.
   */
  setSubmitHoldMs(ms: number): void;
  /** Submits answered so far (a held one counts once its answer is sent). */
  readonly answeredSubmits: number;
  /** The next jobs end these ways, in order; then "ok". */
  queueEnds(...ends: QueueJobEnd[]): void;
  /** The next submits of `account` answer these statuses (with an optional retry-after), in order. */
  queueSubmitFaults(account: string, ...faults: { status: number; retryAfterMs?: number }[]): void;
  /**
   * The next status polls (or, fal, result fetches) of any job answer these instead, in order;
   * the job itself goes on (a poll that failed did not look at it).
   */
  queueReadFaults(on: "status" | "result", ...faults: QueueReadFault[]): void;
  /** The submit requests received (no polls, cancels or downloads). */
  submits(): QueueReceived[];
  reset(): void;
  stop(): Promise<void>;
}

interface FakeQueueJob {
  id: string;
  polls: number;
  end: QueueJobEnd;
  width: number;
  height: number;
  canceled: boolean;
}

export function startFakeFal(): FakeQueue {
  return startFakeQueue("fal");
}
export function startFakeReplicate(): FakeQueue {
  return startFakeQueue("replicate");
}
export function startFakeBfl(): FakeQueue {
  return startFakeQueue("bfl");
}

function startFakeQueue(kind: QueueFakeKind): FakeQueue {
  const received: QueueReceived[] = [];
  const cancels: string[] = [];
  const jobs = new Map<string, FakeQueueJob>();
  let ends: QueueJobEnd[] = [];
  const submitFaults = new Map<string, { status: number; retryAfterMs?: number }[]>();
  const readFaults: Record<"status" | "result", QueueReadFault[]> = { status: [], result: [] };
  let pendingPolls = 2;
  let syncDataUris = false;
  let submitHoldMs = 0;
  let answeredSubmits = 0;
  let next = 0;

  const accountOfRequest = (r: Request): string | null => {
    const auth = r.headers.get("authorization");
    if (kind === "fal") return auth?.startsWith("Key ") ? auth.slice(4) : null;
    if (kind === "replicate") return auth?.startsWith("Bearer ") ? auth.slice(7) : null;
    return r.headers.get("x-key");
  };
  const sizeOfInput = (json: Record<string, unknown>): { width: number; height: number } => {
    const src = (kind === "replicate" ? (json.input as Record<string, unknown>) : kind === "fal" ? (json.image_size as Record<string, unknown>) : json) ?? {};
    const w = Number(src.width);
    const h = Number(src.height);
    return { width: w > 0 ? w : 32, height: h > 0 ? h : 32 };
  };
  const falBase = (path: string) => path.split("/").slice(0, 3).join("/"); // /owner/name (fal drops the subpath)

  const png = (job: FakeQueueJob) => makePng(job.width, job.height, () => [200, 90, 20, 255]);

  function prediction(origin: string, job: FakeQueueJob, sync = false): Record<string, unknown> {
    const base = { id: job.id, urls: { get: `${origin}/v1/predictions/${job.id}`, cancel: `${origin}/v1/predictions/${job.id}/cancel` }, error: null, output: null };
    if (job.canceled) return { ...base, status: "canceled" };
    if (job.end === "never" || job.polls < pendingPolls) return { ...base, status: job.polls === 0 ? "starting" : "processing" };
    if (job.end === "ok") return { ...base, status: "succeeded", output: [sync && syncDataUris ? `data:image/png;base64,${Buffer.from(png(job)).toString("base64")}` : `${origin}/files/${job.id}.png`] };
    if (job.end === "canceled") return { ...base, status: "canceled" };
    return { ...base, status: "failed", error: job.end === "moderated" ? "NSFW content detected. Try running it again, or try a different prompt." : "CUDA out of memory" };
  }

  /** A fal job is done (COMPLETED) once its pending polls are over, or when it was cancelled. */
  const falDone = (job: FakeQueueJob) => job.canceled || (job.end !== "never" && job.polls > pendingPolls);

  /** GET response_url: the image, or the job's error as fal sends it (see above). */
  function falResult(origin: string, job: FakeQueueJob): Response {
    if (!falDone(job)) return Response.json({ detail: "Request is still in progress" }, { status: 400 });
    const requestError = (status: number, detail: string, errorType: string) => Response.json({ detail, error_type: errorType }, { status, headers: { "x-fal-error-type": errorType } });
    if (job.canceled || job.end === "canceled") return requestError(499, "The request was cancelled by the client.", "client_cancelled");
    if (job.end === "failed") return requestError(500, "The runner encountered an internal server error.", "runner_server_error");
    if (job.end === "moderated") {
      const violation = { loc: ["body", "prompt"], msg: "The content could not be processed because it contained material flagged by a content checker.", type: "content_policy_violation", url: "https://docs.fal.ai/errors#content_policy_violation", input: "a red fox" };
      return Response.json({ detail: [violation] }, { status: 422, headers: { "x-fal-retryable": "false" } });
    }
    return Response.json({ images: [{ url: `${origin}/files/${job.id}.png`, width: job.width, height: job.height, content_type: "image/png" }], seed: 1 });
  }

  function readFault(fault: QueueReadFault): Response {
    if ("kind" in fault) {
      // Headers promise a body that never fully arrives: the connection is torn down mid-answer.
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode('{"status":'));
          setTimeout(() => c.error(new Error("fake connection reset")), 2);
        },
      });
      return new Response(body, { status: 200, headers: { "content-type": "application/json", "content-length": "4096" } });
    }
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (fault.retryAfter !== undefined) headers["retry-after"] = fault.retryAfter;
    return new Response(fault.body ?? JSON.stringify({ detail: `fake fault ${fault.status}` }), { status: fault.status, headers });
  }

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const url = new URL(request.url);
      const origin = url.origin;
      if (url.pathname.startsWith("/files/")) {
        const job = jobs.get(url.pathname.slice(7).replace(/\.png$/, ""));
        if (!job) return new Response("gone", { status: 404 });
        return new Response(png(job), { headers: { "content-type": "image/png" } });
      }
      const account = accountOfRequest(request);
      const rec: QueueReceived = {
        method: request.method,
        path: url.pathname + url.search,
        account: account ?? "(none)",
        authorization: request.headers.get("authorization"),
        xKey: request.headers.get("x-key"),
        prefer: request.headers.get("prefer"),
      };
      if (request.method === "POST" && (request.headers.get("content-type") ?? "").includes("json")) rec.json = (await request.json()) as Record<string, unknown>;
      received.push(rec);
      if (!account) return Response.json({ detail: "missing credentials" }, { status: 401 });

      // Polls, results and cancels.
      const jobPath =
        kind === "fal" ? /\/requests\/([^/]+)(\/status|\/cancel)?$/.exec(url.pathname) : kind === "replicate" ? /^\/v1\/predictions\/([^/]+)(\/cancel)?$/.exec(url.pathname) : url.pathname === "/v1/get_result" ? [null, url.searchParams.get("id") ?? "", ""] : null;
      if (jobPath) {
        const job = jobs.get(jobPath[1]!);
        if (!job) return Response.json({ detail: "Task not found" }, { status: 404 });
        const tail = jobPath[2] ?? "";
        if (tail === "/cancel") {
          cancels.push(job.id);
          if (kind === "fal" && falDone(job)) return Response.json({ status: "ALREADY_COMPLETED" }, { status: 400 });
          job.canceled = true;
          return kind === "fal" ? Response.json({ status: "CANCELLATION_REQUESTED" }, { status: 202 }) : Response.json(prediction(origin, job));
        }
        const fault = readFaults[kind === "fal" && tail === "" ? "result" : "status"].shift();
        if (fault) return readFault(fault);
        if (kind === "fal" && tail === "") return falResult(origin, job);
        job.polls++;
        if (kind === "fal") {
          const status = falDone(job) ? "COMPLETED" : job.polls === 1 ? "IN_QUEUE" : "IN_PROGRESS";
          const base = `${origin}${falBase(url.pathname.split("/requests/")[0]!)}/requests/${job.id}`;
          return Response.json({ status, request_id: job.id, response_url: base, status_url: `${base}/status`, cancel_url: `${base}/cancel`, ...(status === "IN_QUEUE" ? { queue_position: 0 } : { logs: null }) }, { status: status === "COMPLETED" ? 200 : 202 });
        }
        if (kind === "replicate") return Response.json(prediction(origin, job));
        if (job.end === "never" || job.polls <= pendingPolls) return Response.json({ id: job.id, status: "Pending", result: null, progress: job.polls / (pendingPolls + 1) });
        if (job.end === "ok") return Response.json({ id: job.id, status: "Ready", result: { sample: `${origin}/files/${job.id}.png`, prompt: "", seed: 1 } });
        if (job.end === "moderated") return Response.json({ id: job.id, status: "Content Moderated", result: null });
        return Response.json({ id: job.id, status: "Error", result: null });
      }

      // Submits.
      if (request.method !== "POST" || !rec.json) return Response.json({ detail: "Not Found" }, { status: 404 });
      const fault = submitFaults.get(account)?.shift();
      if (fault) {
        const headers: Record<string, string> = fault.retryAfterMs !== undefined ? { "retry-after-ms": String(fault.retryAfterMs) } : {};
        return Response.json({ detail: `fake refusal ${fault.status} for key ${account}` }, { status: fault.status, headers });
      }
      const { width, height } = sizeOfInput(rec.json);
      const job: FakeQueueJob = { id: `job${++next}`, polls: 0, end: ends.shift() ?? "ok", width, height, canceled: false };
      jobs.set(job.id, job);
      if (kind === "fal") {
        const base = `${origin}${falBase(url.pathname)}/requests/${job.id}`;
        return Response.json({ request_id: job.id, status_url: `${base}/status`, response_url: base, cancel_url: `${base}/cancel`, queue_position: 0 });
      }
      if (kind === "replicate") {
        const wait = /^wait(?:=(\d+))?$/.exec(request.headers.get("prefer") ?? "");
        if (wait && submitHoldMs > 0) await Bun.sleep(Math.min(submitHoldMs, Number(wait[1] ?? 60) * 1000));
        answeredSubmits++;
        // With no pending polls, Prefer: wait answers the finished prediction at once.
        return Response.json(prediction(origin, job, wait !== null), { status: 201 });
      }
      return Response.json({ id: job.id, polling_url: `${origin}/v1/get_result?id=${job.id}`, cost: 4 });
    },
  });

  return {
    url: `http://127.0.0.1:${server.port}`,
    received,
    cancels,
    setPendingPolls: (n) => {
      pendingPolls = n;
    },
    setSyncDataUris: (on) => {
      syncDataUris = on;
    },
    setSubmitHoldMs: (ms) => {
      submitHoldMs = ms;
    },
    get answeredSubmits() {
      return answeredSubmits;
    },
    queueEnds: (...e) => {
      ends.push(...e);
    },
    queueSubmitFaults: (account, ...faults) => submitFaults.set(account, [...(submitFaults.get(account) ?? []), ...faults]),
    queueReadFaults: (on, ...faults) => {
      readFaults[on].push(...faults);
    },
    submits: () => received.filter((r) => r.method === "POST" && r.json !== undefined && !r.path.endsWith("/cancel")),
    reset() {
      received.length = 0;
      cancels.length = 0;
      jobs.clear();
      ends = [];
      submitFaults.clear();
      readFaults.status.length = 0;
      readFaults.result.length = 0;
      pendingPolls = 2;
      syncDataUris = false;
      submitHoldMs = 0;
      answeredSubmits = 0;
      next = 0;
    },
    async stop() {
      await server.stop(true);
    },
  };
}
