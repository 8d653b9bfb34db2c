/**
 * The one table from a thrown value to an API error. Routes and flows just throw (core and
 * engine errors, ApiErrors, Elysia's own); the app's onError and the server's last-resort
 * catch both come here, and the request history describes a failure from the same table.
 */
import { NotFoundError, ParseError, ValidationError } from "elysia";
import { MAX_ERROR_DETAIL_CHARS } from "../core/limits";
import { GateRejected } from "../core/gate";
import { GateUnavailable } from "../core/redisGate";
import { RedisUnavailable } from "../core/redisScript";
import { ClientDisconnected, NoEngineError, type FailureDescription } from "../core/requestFlow";
import { ImageInputError } from "../core/imageInput";
import { ModelNotFoundError } from "../core/imageRequest";
import { TaskCanceled } from "../core/imageRequests";
import { ChatRequestRefused } from "../core/chatRequests";
import { IdempotencyInProgress, IdempotencyKeyReused, InvalidIdempotencyKey } from "../core/idempotency";
import { TaskNotCancelable, TaskNotFound, TaskQueueFull } from "../core/taskRunner";
import {
  EngineError,
  EngineOutputInvalid,
  EngineTimeout,
  UpstreamFailed,
  UpstreamRateLimited,
  UpstreamRejected,
  UpstreamUnavailable,
} from "../core/engine";
import { DEFAULT_TOP_UP_MESSAGE } from "../config";
import { UsageQueryError } from "../core/usage";
import { ImageStorageUnavailable } from "../core/imageArchive";
import type { Logger } from "../logger";
import { isDatabaseBusy } from "../store/busy";
import { isDatabaseUnreachable } from "../store/sql";
import { DatabaseBusyError, KeyCreditCapReached } from "../core/store";
import { InsufficientCreditsError } from "../store/credits";
import {
  ApiError,
  badRequest,
  clientClosedRequest,
  databaseBusy,
  databaseUnavailable,
  gateUnavailable,
  sharedStateUnavailable,
  imageStorageUnavailable,
  insufficientCredits,
  keyCreditCapReached,
  methodNotAllowed,
  modelNotFound,
  notFound,
  serverError,
  tooManyRequests,
} from "./errors";
import { formatValidationError } from "./validation";
import { metaOf, pathOf } from "./requestMeta";

/** What the answers say that the operator words (config), with the defaults of an unconfigured server. */
export interface ErrorWording {
  /** Ends every 402: where credits come from (`[workbench] top_up_message`). */
  topUpMessage: string;
}
export const DEFAULT_ERROR_WORDING: ErrorWording = { topUpMessage: DEFAULT_TOP_UP_MESSAGE };

/** A known failure as the API error it is answered with; null for anything unexpected (a bug). */
export function apiErrorOf(e: unknown, wording: ErrorWording = DEFAULT_ERROR_WORDING): ApiError | null {
  if (e instanceof ApiError) return e;
  if (e instanceof ImageInputError) return badRequest(e.message, e.param, e.reason);
  if (e instanceof ChatRequestRefused) return badRequest(e.problem.message, e.problem.param, e.problem.code);
  if (e instanceof UsageQueryError) return badRequest(e.message, e.param, "invalid_value");
  if (e instanceof InsufficientCreditsError) return insufficientCredits(wording.topUpMessage, e.cost);
  if (e instanceof KeyCreditCapReached) return keyCreditCapReached(e.cap);
  if (e instanceof GateRejected) {
    if (e.reason === "aborted") return clientClosedRequest();
    return tooManyRequests(`${e.message} Retry after ${Math.ceil(e.retryAfterMs / 1000)} s.`, "concurrency_limit_exceeded", e.retryAfterMs);
  }
  if (e instanceof GateUnavailable) return gateUnavailable();
  if (e instanceof RedisUnavailable) return sharedStateUnavailable();
  if (e instanceof ImageStorageUnavailable) return imageStorageUnavailable();
  if (e instanceof ClientDisconnected) return clientClosedRequest();
  if (e instanceof TaskCanceled) return new ApiError(409, "invalid_request_error", e.message, null, "task_canceled");
  if (e instanceof TaskNotCancelable) return new ApiError(409, "invalid_request_error", `This task cannot be canceled: ${e.message}.`, null, "task_not_cancelable");
  if (e instanceof InvalidIdempotencyKey) return badRequest(e.message, null, "invalid_idempotency_key");
  if (e instanceof TaskQueueFull) return tooManyRequests(e.message, "task_queue_full", 5000);
  if (e instanceof TaskNotFound) return notFound(`No task '${e.taskId}': it does not exist, is not yours, or has expired.`, null, e.expired ? "task_expired" : "task_not_found");
  if (e instanceof IdempotencyKeyReused) {
    return badRequest(`The Idempotency-Key '${e.key}' was already used with a different request (method, path or body) in the last 24 hours; send a new key for a new request.`, null, "idempotency_key_reused");
  }
  if (e instanceof IdempotencyInProgress) {
    const busy = tooManyRequests("", "x", 1000);
    return new ApiError(409, "invalid_request_error", `A request with the Idempotency-Key '${e.key}' is still running; retry shortly to get its answer.`, null, "idempotency_request_in_progress", busy.headers);
  }
  if (e instanceof ModelNotFoundError) return modelNotFound(e.model);
  if (e instanceof DatabaseBusyError || isDatabaseBusy(e)) return databaseBusy();
  if (isDatabaseUnreachable(e)) return databaseUnavailable();
  if (e instanceof EngineError) return apiErrorOfEngine(e);
  return null;
}

/**
 * Engines never choose HTTP statuses: their typed failures map here. The answer says what
 * happened in plain words and never the transport details (which upstream or account, the
 * socket error, the upstream's status): those are for admins, in the log line and the request
 * history (describeFailure's `detail`). Only a rejection keeps the upstream's reason, which
 * tells the user what to change in the request.
 */
function apiErrorOfEngine(e: EngineError): ApiError {
  if (e instanceof UpstreamRateLimited) {
    const seconds = Math.max(1, Math.ceil(e.retryAfterMs / 1000));
    // Chat and image models both map here: the wording names neither.
    return tooManyRequests(`The upstream service behind this model is rate limiting requests; retry after ${seconds} s.`, "upstream_rate_limited", e.retryAfterMs);
  }
  if (e instanceof UpstreamRejected) return badRequest(`The upstream rejected the request: ${e.message}`, null, "upstream_rejected");
  if (e instanceof UpstreamUnavailable || e instanceof NoEngineError) {
    return new ApiError(503, "upstream_error", "No upstream is available for this model right now; retry later, or tell the administrator if it persists.", null, "upstream_unavailable");
  }
  if (e instanceof UpstreamFailed) {
    return new ApiError(502, "upstream_error", "The upstream service failed to answer after every attempt; retry later. The x-request-id identifies the request for the administrator.", null, "upstream_error");
  }
  if (e instanceof EngineTimeout) {
    return new ApiError(504, "upstream_error", "The engine did not finish in time; retry later, or ask for less: a smaller size or lower quality for an image, a shorter reply for a chat.", null, "timeout");
  }
  if (e instanceof EngineOutputInvalid) return new ApiError(502, "upstream_error", "The engine returned a result that is not a usable image; retry later.", null, "invalid_engine_output");
  return new ApiError(502, "upstream_error", "The engine failed; retry later. The x-request-id identifies the request for the administrator.", null, "engine_error");
}

/**
 * The request history's code and message for a failure; nothing internal for the unexpected.
 * `message` is what the client was told; `detail` keeps an engine's own words (upstream, account,
 * transport error) for admins and the log.
 */
export function describeFailure(e: unknown): FailureDescription {
  const api = apiErrorOf(e);
  if (!api) return { code: "internal_error", message: "internal error", type: "server_error", param: null };
  // Engines redact secrets from their messages when they build them (engines/redact); the detail is bounded here, once, for the log and the history alike.
  const detail = e instanceof EngineError && e.message !== api.message ? clip(e.message, MAX_ERROR_DETAIL_CHARS) : undefined;
  return { code: api.errorCode ?? "internal_error", message: api.message, type: api.type, param: api.param, ...(detail ? { detail } : {}) };
}

/**
 * Any value thrown while Elysia handled a request → the answer. Unexpected values are logged
 * with the request id and answered 500 without details.
 */
export function toApiError(error: unknown, request: Request, logger: Logger, allowedMethods: () => string[], wording: ErrorWording = DEFAULT_ERROR_WORDING): ApiError {
  const known = apiErrorOf(error, wording);
  if (known) return known;
  // Elysia wraps whatever a parse hook throws (our 413/415/400 from acceptBody) in a ParseError.
  if (error instanceof ParseError) {
    return apiErrorOf(error.cause) ?? badRequest("We could not parse the body of your request; send valid JSON with Content-Type: application/json.", null, "invalid_json");
  }
  if (error instanceof ValidationError) {
    // Our own answer failed its response schema: a bug on our side, not the client's 400.
    if (error.type === "response") {
      // Only where and which rule: the values could be anything, a freshly created key included.
      const first = error.valueError;
      logger.error("response failed its schema", { request_id: metaOf(request).id, path: first?.path ?? null, rule: first?.message ?? null });
      // Not to be retried by the openai clients (which retry a 500 twice): the request has run
      // (an upstream asked, maybe paid) and would most likely break the same way again.
      return serverError({ "x-should-retry": "false" });
    }
    return formatValidationError(error);
  }
  if (error instanceof NotFoundError) {
    const path = pathOf(request);
    const methods = allowedMethods();
    if (methods.length > 0) return methodNotAllowed(request.method, path, methods);
    return notFound(`Unknown route ${request.method} ${path}. See /docs for the API.`, null, "unknown_route");
  }
  logger.error("unhandled error", {
    request_id: metaOf(request).id,
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    stack: error instanceof Error ? error.stack : undefined,
  });
  return serverError();
}

/** At most `max` characters, an ellipsis saying where it was cut. */
function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
