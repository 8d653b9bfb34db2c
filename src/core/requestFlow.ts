/**
 * What the image flow (imageRequests) and the chat flow (chatRequests) share: their
 * dependencies, how a failure is described for the history, and the failures both may throw
 * before any work starts.
 */
import type { Logger } from "../logger";
import type { BackgroundWork } from "./background";
import { EngineError, type EngineLookup } from "./engine";
import type { Gate } from "./gate";
import type { FlowStore } from "./store";

/** How a failure is recorded in the request history (http/errorMapping owns the table). */
export interface FailureDescription {
  code: string;
  message: string;
  /** The rest of the OpenAI error object, for a task's `error` (defaults: server_error, null). */
  type?: string;
  param?: string | null;
  /** The engine's own words when they differ from `message` (upstream, account, transport error): for admins and the log only. */
  detail?: string;
}

export interface FlowDeps {
  store: FlowStore;
  gate: Gate;
  engines: EngineLookup;
  /** Work that outlives its HTTP request; the graceful stop waits for it. */
  background: BackgroundWork;
  logger: Logger;
  clock: () => number;
  /** The server's deadline on one engine run. */
  generationTimeoutMs: number;
  describeFailure: (e: unknown) => FailureDescription;
}

/** The model's source has no engine registered: refused before anything else happens. */
export class NoEngineError extends EngineError {
  override name = "NoEngineError";
}

/** The client closed the connection before the answer was ready (nobody reads it). */
export class ClientDisconnected extends Error {
  override name = "ClientDisconnected";
}
