/**
 * The one owner of the error shape: every non-2xx answer of the service is
 * {"error":{"message","type","param","code"}}, as OpenAI's clients expect.
 */
import { t } from "elysia";
import type { ErrorBody } from "../core/errorBody";

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "insufficient_credits"
  | "rate_limit_error"
  | "server_error"
  | "upstream_error";

export type { ErrorBody } from "../core/errorBody";

/**
 * An error that becomes an HTTP answer. It must not carry a property named `code`:
 * Elysia would then not recognise it as our class (the OpenAI code lives in `errorCode`).
 */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    message: string,
    readonly param: string | null = null,
    readonly errorCode: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  body(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.errorCode } };
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, "invalid_request_error", message, param, code);

export const unauthorized = (message: string, code: string | null = null) =>
  new ApiError(401, "authentication_error", message, null, code);

export const forbidden = (message: string, code: string | null = null) =>
  new ApiError(403, "permission_error", message, null, code);

export const notFound = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(404, "not_found_error", message, param, code);

export const modelNotFound = (model: string, param = "model") =>
  new ApiError(404, "invalid_request_error", `The model '${model}' does not exist or you do not have access to it.`, param, "model_not_found");

export const methodNotAllowed = (method: string, path: string, allowed: string[]) =>
  new ApiError(405, "invalid_request_error", `Method ${method} is not allowed on ${path}; use ${allowed.join(", ")}.`, null, "method_not_allowed", {
    allow: allowed.join(", "),
  });

export const unsupportedMediaType = (got: string | null, expected: string[]) =>
  new ApiError(
    415,
    "invalid_request_error",
    `Unsupported Content-Type ${got ? `'${got}'` : "(none)"}; send ${expected.join(" or ")}.`,
    null,
    "unsupported_media_type",
  );

export const payloadTooLarge = (limit: number) =>
  new ApiError(413, "invalid_request_error", `The request body exceeds the limit of ${limit} bytes.`, null, "request_too_large");

export const bodyTooSlow = (rules: { graceMs: number; minBytesPerSecond: number }) =>
  new ApiError(
    408,
    "invalid_request_error",
    `The request body arrived too slowly: after the first ${rules.graceMs / 1000} s it must keep up an average of ${rules.minBytesPerSecond} bytes per second.`,
    null,
    "request_timeout",
  );

const credits = (n: number) => `${n} credit${n === 1 ? "" : "s"}`;

/**
 * 402; with the cost known, the message names the model's price and the balance it met. It ends
 * with `topUpMessage`: where credits come from (`[workbench] top_up_message`).
 */
export const insufficientCredits = (topUpMessage: string, cost?: { price: number; balance: number }) =>
  new ApiError(
    402,
    "insufficient_credits",
    `${
      cost
        ? `Insufficient credits to generate an image: this model costs ${credits(cost.price)} per image and your balance is ${cost.balance}.`
        : "Insufficient credits to generate an image: your balance is below the model's price."
    } ${topUpMessage}`.trim(),
    null,
    "insufficient_credits",
    { "x-should-retry": "false" },
  );

/** The key (not the account) has spent its cap: 402 like an empty balance, never retried. */
export const keyCreditCapReached = (cap: number) =>
  new ApiError(
    402,
    "insufficient_credits",
    `This API key has reached its credit cap of ${cap} ${cap === 1 ? "credit" : "credits"}; nothing was charged. Raise the key's cap in the workbench (API keys) or use another key.`,
    null,
    "key_credit_cap_reached",
    { "x-should-retry": "false" },
  );

/** 429 with both retry headers the openai clients honour. */
export const tooManyRequests = (message: string, code: string, retryAfterMs: number, type: ErrorType = "rate_limit_error") => {
  const ms = Math.max(1, Math.ceil(retryAfterMs));
  return new ApiError(429, type, message, null, code, {
    "retry-after": String(Math.max(1, Math.ceil(ms / 1000))),
    "retry-after-ms": String(ms),
  });
};

/** The shared concurrency gate ([redis] url) did not answer in time: nothing was admitted or charged. */
export const gateUnavailable = () => {
  const err = tooManyRequests("", "gate_unavailable", 1000);
  return new ApiError(503, "server_error", "The shared concurrency gate (Redis) is unreachable; nothing was charged. Retry shortly.", null, "gate_unavailable", err.headers);
};

/** Redis ([redis] url) did not answer in time for shared state other than the gate (sign-in and redemption throttles). */
export const sharedStateUnavailable = () => {
  const err = tooManyRequests("", "redis_unavailable", 1000);
  return new ApiError(503, "server_error", "The shared state server (Redis) is unreachable; retry shortly.", null, "redis_unavailable", err.headers);
};

/** Another process holds the database's write lock (a CLI command, a backup): nothing was written. */
export const databaseBusy = () => {
  const err = tooManyRequests("", "database_busy", 1000);
  return new ApiError(503, "server_error", "The database is busy with another process's write; nothing was changed. Retry shortly.", null, "database_busy", err.headers);
};

/** The shared database ([database] url) cannot be reached: nothing was changed (a charge never happened). */
export const databaseUnavailable = () => {
  const err = tooManyRequests("", "database_unavailable", 1000);
  return new ApiError(503, "server_error", "The database is unreachable; nothing was changed. Retry shortly.", null, "database_unavailable", err.headers);
};

/** The kept images' storage (an S3 bucket) failed or did not answer: the image exists but cannot be served now. */
export const imageStorageUnavailable = () => {
  const err = tooManyRequests("", "storage_unavailable", 5000);
  return new ApiError(503, "server_error", "The image storage is unreachable right now; retry shortly.", null, "storage_unavailable", err.headers);
};

/** 499 (nginx's "client closed request"): logged and recorded; nobody is there to read it. */
export const clientClosedRequest = () => new ApiError(499, "invalid_request_error", "The client closed the connection.", null, "client_disconnected");

export const serverError = (headers: Record<string, string> = {}) =>
  new ApiError(500, "server_error", "The server had an error while processing your request. The request id in x-request-id identifies it in the log.", null, "internal_error", headers);

export function errorResponse(err: ApiError, extraHeaders: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(err.body()), {
    status: err.status,
    headers: { "content-type": "application/json", ...err.headers, ...extraHeaders },
  });
}

/** TypeBox model of the error body, used in every route's response map (and the OpenAPI document). */
export const ErrorResponseSchema = t.Object(
  {
    error: t.Object({
      message: t.String({ description: "What went wrong and how to fix it." }),
      type: t.String({ description: "Error category, e.g. invalid_request_error." }),
      param: t.Union([t.String(), t.Null()], { description: "The request field at fault, e.g. messages[3].role." }),
      code: t.Union([t.String(), t.Null()], { description: "Machine-readable code, e.g. model_not_found." }),
    }, { additionalProperties: false }),
  },
  {
    // Explicit: Elysia sets it in place on response schemas it compiles, and this constant is
    // shared by every app in the process, so the OpenAPI document would depend on what ran first.
    // No example here: each status of each operation shows its own (openapiDocument, errorExamples).
    additionalProperties: false,
  },
);
