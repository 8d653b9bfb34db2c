/** Schemas and OpenAPI details that several route modules share, defined once. */
import { Elysia } from "elysia";
import { Type } from "@sinclair/typebox";
import { ErrorResponseSchema } from "./errors";

/** Registers reference models so each appears once in components.schemas. */
export const sharedModels = new Elysia({ name: "models.shared" }).model({ ErrorResponse: ErrorResponseSchema });

export const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: "Invalid request: the message names the field and the rule; `param` is the field's path.",
  401: "Missing, unknown or revoked API key (`invalid_api_key`), or an expired one (`api_key_expired`).",
  402: "Not enough credits (`insufficient_credits`; the message ends with where credits come from, `[workbench] top_up_message`), or the API key has spent its credit cap (`key_credit_cap_reached`). Not retried by the openai clients (`x-should-retry: false`).",
  403: "The account is disabled (`account_disabled`), or the API key may not use the model (`model_not_allowed`, param `model`).",
  404: "Unknown model (`model_not_found`) or resource (`task_not_found`, `task_expired`).",
  409: "The request conflicts with the resource's state: a task that has ended (`task_not_cancelable`), or an Idempotency-Key whose first request is still running (`idempotency_request_in_progress`, retried by the openai clients).",
  413: "The request body is larger than the server accepts.",
  415: "Unsupported Content-Type.",
  429: "A concurrency limit, the queue or the upstream rate limit was hit; see `retry-after` / `retry-after-ms`.",
  500: "Internal error; the x-request-id header identifies it in the server log.",
  502: "Every upstream attempt failed.",
  503: "No upstream account is usable.",
  504: "The engine did not finish in time.",
};

/** `response` entries for the given error statuses, all with the shared error body. */
export function errorResponses(...statuses: number[]): Record<number, "ErrorResponse"> {
  return Object.fromEntries(statuses.map((s) => [s, "ErrorResponse" as const]));
}


export const bearerSecurity = [{ bearerAuth: [] as string[] }];

/**
 * A strict integer for request and answer schemas: TypeBox's own. Elysia's t.Integer also
 * accepts numeric strings (meant for query coercion), which would let `"n": "1"` through a JSON
 * body, where OpenAI's API (and every client written for it) treats it as a type error.
 */
export const Integer = Type.Integer;
