/**
 * One chat request from a validated job to the engine's reply, in the shape of the image flow
 * (core/imageRequests.ts) without the charge: chat is free.
 *   find the engine → admit (the chat gate) → engine (deadline, client's signal) → record → reply
 * A failure is recorded in the history and thrown as it is; the http layer maps it (and
 * describes it for the history row through `describeFailure`, the same table).
 */
import type { FlowStore } from "./store";
import { EngineError, EngineTimeout, type ChatDelta, type ChatJob, type ChatMessage, type ChatRequestProblem, type ChatResult } from "./engine";
import type { ChatParams } from "./chatRequest";
import { withDeadline } from "./deadline";
import type { CancelScope } from "./cancelScope";
import { signalOf, type ClientSignal } from "./clientSignal";
import { ClientDisconnected, NoEngineError, type FlowDeps } from "./requestFlow";
import { describeSource, type CatalogModel } from "./models";

export interface ChatRequest {
  requestId: string;
  userId: number;
  keyId: number | null;
  model: CatalogModel;
  messages: ChatMessage[];
  params: ChatParams;
  /** What the request history keeps of the conversation (the start of the last user message). */
  historyPrompt: string;
  /** A streamed answer's listener for the reply's pieces (ChatJob.onDelta). */
  onDelta?: (delta: ChatDelta) => void;
}

/** The engine cannot serve this request (e.g. tools for builtin-chat): a 400 naming the field, before any slot is taken. */
export class ChatRequestRefused extends Error {
  override name = "ChatRequestRefused";
  constructor(readonly problem: ChatRequestProblem) {
    super(problem.message);
  }
}

export interface ChatOutcome {
  result: ChatResult;
  queueMs: number;
  generationMs: number;
}

/** Chat is free: the flow writes history rows only, never the ledger. */
export interface ChatFlowDeps extends Omit<FlowDeps, "store"> {
  store: Pick<FlowStore, "requests">;
}

/**
 * The engine's job: its `signal` is made only if the engine reads it (a pool-run engine uses
 * `cancel`). A class rather than an object literal with a getter, which JavaScriptCore defines
 * anew on every evaluation (engines/pool's ScopedAttempt says what that costs).
 */
class FlowChatJob implements ChatJob {
  declare onDelta?: (delta: ChatDelta) => void;

  constructor(
    readonly model: CatalogModel,
    readonly messages: ChatMessage[],
    readonly params: ChatParams,
    readonly cancel: CancelScope,
  ) {}

  get signal(): AbortSignal {
    return this.cancel.signal;
  }
}

function chatJob(req: ChatRequest, scope: CancelScope, onDelta: ChatRequest["onDelta"]): ChatJob {
  const job = new FlowChatJob(req.model, req.messages, req.params, scope);
  if (onDelta) job.onDelta = onDelta;
  return job;
}

const asOutcome = (outcome: ChatOutcome): ChatOutcome => outcome;

/**
 * `clientSignal` may be a getter (e.g. `() => request.signal`): it is read only if the request
 * runs long enough to matter. `answer` turns the outcome into the caller's answer in this
 * frame (after the history row is queued), so the caller needs no async frame of its own.
 */
export function runChatRequest(deps: ChatFlowDeps, req: ChatRequest, clientSignal?: ClientSignal): Promise<ChatOutcome>;
export function runChatRequest<R>(deps: ChatFlowDeps, req: ChatRequest, clientSignal: ClientSignal | undefined, answer: (outcome: ChatOutcome) => R): Promise<R>;
export async function runChatRequest(deps: ChatFlowDeps, req: ChatRequest, clientSignal?: ClientSignal, answer: (outcome: ChatOutcome) => unknown = asOutcome): Promise<unknown> {
  const started = performance.now();
  const engine = deps.engines.chatEngine(req.model);
  if (!engine) throw new NoEngineError(`no chat engine is registered for ${describeSource(req.model.source)} (model ${req.model.id})`);
  const problem = engine.requestProblem?.({ model: req.model, messages: req.messages, params: req.params });
  if (problem) throw new ChatRequestRefused(problem);
  // Admitted at once without a promise when it can run (a signal already aborted is admit()'s to refuse).
  const permit = (typeof clientSignal !== "object" && deps.gate.admitNow?.(req.userId)) || (await deps.gate.admit(req.userId, clientSignal));
  const onDelta = req.onDelta;
  // The permit is released when the engine really stops (withDeadline's onStopped), so the limit
  // stays true even for an engine that ignores its signal; the graceful stop waits for it too,
  // counted by that same reaction (no promise of the background's own to settle).
  const { background } = deps;
  background.begin();
  const run = withDeadline(deps.generationTimeoutMs, (scope) => engine.chat(chatJob(req, scope, onDelta)), clientSignal, () => {
    permit.release();
    background.end();
  });
  const generationStarted = performance.now();
  let outcome: ChatOutcome;
  try {
    const result = await run.result;
    outcome = { result, queueMs: permit.waitedMs, generationMs: Math.round(performance.now() - generationStarted) };
    // No usage (a stream whose upstream sent none): the history says "not known", not 0.
    const trace = result.trace;
    deps.store.requests.recordChat(
      {
        id: req.requestId, userId: req.userId, keyId: req.keyId, model: req.model.id, prompt: req.historyPrompt, status: "succeeded",
        promptTokens: result.usage?.promptTokens, completionTokens: result.usage?.completionTokens, queueMs: Math.round(outcome.queueMs), generationMs: outcome.generationMs,
        upstreamId: trace?.upstreamId, accountId: trace?.accountId, attempts: trace?.attempts, upstreamLatencyMs: trace?.upstreamLatencyMs,
      },
      deps.clock(),
    );
  } catch (e) {
    // A client that left aborts the engine, which may say so as a timeout (the pool does): still a disconnect.
    // The client's signal is read here only on a failure (it may be a getter: core/clientSignal).
    const gone = (!(e instanceof EngineError) || e instanceof EngineTimeout) && signalOf(clientSignal)?.aborted ? new ClientDisconnected("the client closed the connection") : e;
    const failure = deps.describeFailure(gone);
    const trace = e instanceof EngineError ? e.trace : undefined;
    deps.store.requests.recordChat(
      {
        id: req.requestId, userId: req.userId, keyId: req.keyId, model: req.model.id, prompt: req.historyPrompt, status: "failed",
        generationMs: Math.round(performance.now() - started), errorCode: failure.code, errorMessage: failure.message, errorDetail: failure.detail ?? null, ...trace,
      },
      deps.clock(),
    );
    // The engine's own words (upstream, account, transport error) are for admins: the log and the history row (error_detail) keep them.
    if (failure.detail) deps.logger.warn("chat request failed", { request_id: req.requestId, user_id: req.userId, error_code: failure.code, detail: failure.detail });
    throw gone;
  }
  return answer(outcome);
}
