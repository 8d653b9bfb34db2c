/**
 * The OpenAPI document's error examples: for each status, the answers the server really gives,
 * made by the same code that answers (the error constructors, the mapping table, the auth step,
 * the validation formatter), so the document cannot drift from the wording.
 */
import { Value } from "@sinclair/typebox/value";
import { EngineTimeout, UpstreamFailed, UpstreamRateLimited, UpstreamUnavailable } from "../core/engine";
import { IdempotencyInProgress } from "../core/idempotency";
import { InsufficientCreditsError, KeyCreditCapReached, type KeyOwner } from "../core/store";
import { TaskNotCancelable, TaskNotFound } from "../core/taskRunner";
import { usageRange } from "../core/usage";
import { assertModelAllowed, bearerSecret, keyPrincipal, missingApiKey, type Principal } from "./auth";
import { apiErrorOf, type ErrorWording } from "./errorMapping";
import { ApiError, databaseBusy, modelNotFound, payloadTooLarge, serverError, unsupportedMediaType, type ErrorBody } from "./errors";
import { imageLinkRefused, imageNotKept } from "./files";
import { describeFirstError } from "./validation";
import { modelPathNotDecodable } from "./v1/models";
import { imageTaskListQuery } from "./v1/images/tasks";
import { ChatCompletionRequest } from "./v1/chat/model";
import { ImageGenerationRequest } from "./v1/images/model";

export interface ErrorExample {
  status: number;
  /** The key in the document's `examples` map: the error's code. */
  name: string;
  summary: string;
  value: ErrorBody;
  /** The operations (by path) it belongs to; every operation with the status when absent. */
  paths?: RegExp;
}

export interface ErrorExampleSettings extends ErrorWording {
  maxBodyBytes: number;
}

const EXAMPLE_ID = "req_4fQ8sJ2kLm9XbT1vYc0pRz7a";
const EXAMPLE_KEY = "sk-atl-AbCd1234example";
const OWNER: KeyOwner = {
  key_id: 1,
  key_prefix: "sk-atl-AbCd1234",
  key_revoked_at: null,
  user_id: 1,
  email: "user@example.com",
  role: "user",
  disabled: 0,
  key_name: "example",
  key_created_at: 0,
  key_expires_at: null,
  key_credit_cap: null,
  key_allowed_models: null,
};

/** What the auth step throws for a request with these headers, when a key names `owner` (expired or not). */
function authFailure(headers: Record<string, string>, owner: KeyOwner | null = null, expired = false): ApiError {
  // The auth step's own checks, in its order, without a key store: the header, then the key's owner.
  try {
    const header = headers.authorization;
    if (!header) throw missingApiKey();
    bearerSecret(header);
    keyPrincipal(owner, expired);
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error("the auth step accepted a request the error examples expect it to refuse");
}

/** What a key limited to builtin-image answers when it asks for another model. */
function modelRefused(): ApiError {
  const principal = { userId: 1, keyId: 1, email: OWNER.email, role: "user", via: "key", key: { limits: { expiresAt: null, creditCap: null, allowedModels: ["builtin-image"] } } } as unknown as Principal;
  try {
    assertModelAllowed(principal, "gpt-image-1");
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error("the key's allow-list accepted a model the error examples expect it to refuse");
}

function mapped(e: unknown, wording: ErrorWording): ApiError {
  const api = apiErrorOf(e, wording);
  if (!api) throw new Error(`no API error for ${String(e)}`);
  return api;
}

const FILES = /^\/files\//;
const TASKS = /^\/v1\/images\/tasks/;
const IMAGES = /^\/v1\/images\/(generations|edits)$/;

export function errorExamples(settings: ErrorExampleSettings): ErrorExample[] {
  const example = (summary: string, error: ApiError, paths?: RegExp): ErrorExample => ({
    status: error.status,
    name: error.errorCode ?? error.type,
    summary,
    value: error.body(),
    ...(paths ? { paths } : {}),
  });
  const emptyPrompt = describeFirstError(Value.Errors(ImageGenerationRequest, { prompt: "" }).First());
  const missingPrompt = describeFirstError(Value.Errors(ImageGenerationRequest, {}).First());
  const badStatus = describeFirstError(Value.Errors(imageTaskListQuery(), { status: "done" }).First(), " in query");
  const badDate = (() => {
    try {
      usageRange({ from: "last week" }, 0, 7);
    } catch (e) {
      return mapped(e, settings);
    }
    throw new Error("usageRange accepted a date the error examples expect it to refuse");
  })();
  const noMessages = describeFirstError(Value.Errors(ChatCompletionRequest, { model: "builtin-chat", messages: [] }).First());
  return [
    example("A field breaks its rule", emptyPrompt, IMAGES),
    example("A required field is missing", missingPrompt, IMAGES),
    example("A field breaks its rule", noMessages, /^\/v1\/chat\//),
    example("A query value breaks its rule", badStatus, /^\/v1\/images\/tasks$/),
    example("A date is not YYYY-MM-DD", badDate, /^\/v1\/usage$/),
    example("The model id is not valid percent-encoding", modelPathNotDecodable(), /^\/v1\/models\//),
    example("No API key", authFailure({})),
    example("Unknown or revoked key", authFailure({ authorization: `Bearer ${EXAMPLE_KEY}` })),
    example("The key has expired", authFailure({ authorization: `Bearer ${EXAMPLE_KEY}` }, OWNER, true)),
    example("Not enough credits", mapped(new InsufficientCreditsError("insufficient credits", { price: 1, balance: 0 }), settings)),
    example("The key has spent its credit cap", mapped(new KeyCreditCapReached(100), settings)),
    example("The account is disabled", authFailure({ authorization: `Bearer ${EXAMPLE_KEY}` }, { ...OWNER, disabled: 1 }), /^\/v1\//),
    example("The key may not use this model", modelRefused(), /^\/v1\/(images\/(generations|edits)|chat\/)/),
    example("The link has expired", imageLinkRefused("expired"), FILES),
    example("The link was altered", imageLinkRefused("bad_signature"), FILES),
    example("The image is no longer kept", imageNotKept(), FILES),
    example("Unknown model", modelNotFound("gpt-image-9"), /^\/v1\/(models|images\/(generations|edits)|chat)/),
    example("Unknown or expired task", mapped(new TaskNotFound(EXAMPLE_ID), settings), TASKS),
    example("The task has already ended", mapped(new TaskNotCancelable("it has already succeeded"), settings), TASKS),
    example("The first request with this Idempotency-Key is still running", mapped(new IdempotencyInProgress("4b1c9f0e-order-42"), settings), IMAGES),
    example("The body is over the limit", payloadTooLarge(settings.maxBodyBytes)),
    example("A Content-Type the operation does not take", unsupportedMediaType("text/plain", ["application/json"])),
    example("The upstream is rate limiting", mapped(new UpstreamRateLimited("upstream 'primary': 429 Too Many Requests", 20_000), settings)),
    example("An unexpected error", serverError()),
    example("Every upstream attempt failed", mapped(new UpstreamFailed("upstream 'primary': could not reach the upstream: ECONNREFUSED"), settings)),
    example("No upstream is usable", mapped(new UpstreamUnavailable("every account of upstream 'primary' is disabled"), settings)),
    example("Another process holds the database", databaseBusy()),
    example("The engine ran out of time", mapped(new EngineTimeout("no result after 300000 ms"), settings)),
  ];
}
