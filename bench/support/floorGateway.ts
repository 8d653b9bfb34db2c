/**
 * The floor gateway of bench/floor.ts: the smallest correct chat gateway with Atelier's duties
 * on the same stack (Bun + Elysia + TypeBox + bun:sqlite + prom-client), each duty switched on
 * by a step number so that one step's cost is the difference from the step before:
 *
 *   bun bench/support/floorGateway.ts <step 1..8> <upstream chat URL> <data dir>
 *
 *   1 Elysia route, Atelier's request schema, fetch + res.json, the chat.completion answer
 *   2 + one AbortController and one timer per request (the deadline)
 *   3 + the key: SHA-256 of the Bearer secret, a Map lookup (401 for an unknown key)
 *   4 + the history row, through Atelier's own RequestStore.recordChat: queued and written every
 *       20 ms in one transaction of multi-row INSERTs into the `requests` table (the data dir's
 *       atelier.db, migrated by Atelier's migrations: its columns, indexes, WAL, synchronous=NORMAL;
 *       WAL checkpoints on a worker thread, as Atelier's server makes them)
 *   5 + the access-log line (Atelier's logger and batched sink) appended to <data dir>/access.log
 *   6 + the request metrics (Atelier's RequestMetrics in a prom-client registry, GET /metrics)
 *   7 + Elysia validates the answer against Atelier's response schema
 *   8 the same, the upstream called through Atelier's keep-alive HTTP/1.1 client (src/engines/http1)
 *       instead of fetch, listening to a CancelScope aborted by the timer
 *
 * Without the key step every request is served as the bench user (the data dir's only key).
 * SIGTERM stops it gracefully: in-flight requests finish, queued rows and lines are written.
 * Prints "port N" once it listens.
 */
import { closeSync, openSync } from "node:fs";
import { join } from "node:path";
import { Elysia } from "elysia";
import { Registry } from "prom-client";
import { hashApiKey } from "../../src/core/apiKeys";
import { CancelScope } from "../../src/core/cancelScope";
import { http1Request, http1Target, type Http1Target } from "../../src/engines/http1";
import { chatMessagesFrom } from "../../src/core/chatRequest";
import { newTimeOrderedId } from "../../src/core/ids";
import { ApiError, badRequest, errorResponse, modelNotFound, unauthorized } from "../../src/http/errors";
import { LATENCY_BUCKETS } from "../../src/http/metrics";
import { RequestMetrics } from "../../src/http/requestMetrics";
import { historyPromptOf } from "../../src/http/v1/chat";
import { ChatCompletion, ChatCompletionRequest } from "../../src/http/v1/chat/model";
import { batchedStdout, createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

/** The model the floor offers (the same public id as the bench's Atelier) and what it asks upstream for. */
export const FLOOR_MODEL = "mock-chat";
const UPSTREAM_MODEL = "mock-model";
const ROUTE = "/v1/chat/completions";
/** The deadline of one request (Atelier's default generation_timeout_ms). */
const DEADLINE_MS = 300_000;
const FLUSH_MS = 20;
const LOG_FLUSH_BYTES = 64 * 1024;

interface Owner {
  userId: number;
  keyId: number;
  keyPrefix: string;
}

/** What the route learned about a request, for the access-log line written around it. */
interface RequestState {
  owner: Owner;
  id?: string;
  model?: string;
  outcome?: "succeeded" | "failed";
}

/** The upstream's answer, as much of it as the gateway reads. */
interface UpstreamAnswer {
  choices?: { message?: { content?: unknown }; finish_reason?: unknown }[];
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown };
}
const utf8 = new TextDecoder();
const FINISH_REASONS = new Set(["stop", "length", "content_filter", "tool_calls"]);

if (import.meta.main) {
  const [stepArg, upstream, dataDir] = process.argv.slice(2);
  if (!stepArg || !upstream || !dataDir) throw new Error("usage: bun bench/support/floorGateway.ts <step 1..8> <upstream chat URL> <data dir>");
  const stop = serveFloor(Number(stepArg), upstream, dataDir);
  process.once("SIGTERM", async () => {
    await stop();
    process.exit(0);
  });
}

/** Serves the floor gateway at this step; the function it returns stops it gracefully. */
export function serveFloor(step: number, upstream: string, dataDir: string): () => Promise<void> {
  const withDeadline = step >= 2;
  const withKey = step >= 3;
  const withHistory = step >= 4;
  const withLog = step >= 5;
  const withMetrics = step >= 6;
  const withResponseSchema = step >= 7;
  const withKeepAliveClient = step >= 8;
  const target = withKeepAliveClient ? http1Target(upstream, "") : null;
  if (withKeepAliveClient && !target) throw new Error(`the keep-alive client does not take ${upstream}`);
  const upstreamHeaders = Object.freeze({ "content-type": "application/json", authorization: "Bearer sk-mock-secret" });

  const db = openDatabase(dataDir);
  // Keys in memory, by their hash (the bench makes them before the gateway starts).
  const keys = new Map<string, Owner>();
  for (const k of db
    .query<{ id: number; user_id: number; prefix: string; secret_hash: string }, []>(
      "SELECT k.id, k.user_id, k.prefix, k.secret_hash FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.revoked_at IS NULL AND u.disabled = 0",
    )
    .all()) {
    keys.set(k.secret_hash, { userId: k.user_id, keyId: k.id, keyPrefix: k.prefix });
  }
  const benchOwner = keys.values().next().value;
  if (!benchOwner) throw new Error(`no API key in ${dataDir}`);
  const states = new WeakMap<Request, RequestState>();

  // History: Atelier's own store, whose chat rows are queued and written in batches (store/requests).
  const store = createStore(db, latestVersion());
  // Its WAL checkpoints on a worker thread, as `atelier serve` makes them (store/walCheckpoints).
  if (withHistory) store.checkpointInBackground((message) => console.error(message));

  // The access log: Atelier's logger and its batched sink (one write every 20 ms or 64 KiB), to a file.
  const logFd = openSync(join(dataDir, "access.log"), "a");
  const logSink = batchedStdout(FLUSH_MS, LOG_FLUSH_BYTES, logFd);
  const accessLog = createLogger(logSink.write);

  const registry = new Registry();
  const metrics = new RequestMetrics(registry, LATENCY_BUCKETS);

  /** The upstream's answer to these messages, or an ApiError (502/504). */
  async function callUpstream(messages: unknown): Promise<UpstreamAnswer | ApiError> {
    if (target) return callUpstreamKeepAlive(target, messages);
    const controller = withDeadline ? new AbortController() : undefined;
    const timer = controller ? setTimeout(() => controller.abort(), DEADLINE_MS) : undefined;
    try {
      const res = await fetch(upstream, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer sk-mock-secret" },
        body: JSON.stringify({ model: UPSTREAM_MODEL, messages }),
        signal: controller?.signal,
      });
      if (!res.ok) {
        await res.arrayBuffer();
        return new ApiError(502, "upstream_error", `The upstream answered ${res.status}.`, null, "upstream_error");
      }
      return (await res.json()) as UpstreamAnswer;
    } catch (e) {
      if (controller?.signal.aborted) return new ApiError(504, "upstream_error", "The upstream did not answer in time.", null, "timeout");
      return new ApiError(502, "upstream_error", `The upstream could not be reached (${e instanceof Error ? e.name : "error"}).`, null, "upstream_error");
    } finally {
      if (timer) clearTimeout(timer);
    }
  }

  /** callUpstream through the keep-alive client: one CancelScope and one timer per request. */
  async function callUpstreamKeepAlive(target: Http1Target, messages: unknown): Promise<UpstreamAnswer | ApiError> {
    const scope = new CancelScope();
    const timer = setTimeout(() => scope.abort(), DEADLINE_MS);
    try {
      const answer = await http1Request(target, {
        method: "POST",
        headers: upstreamHeaders,
        body: JSON.stringify({ model: UPSTREAM_MODEL, messages }),
        cancel: scope,
        limitFor: () => 16 * 1024 * 1024,
      });
      if (answer.head.status !== 200) return new ApiError(502, "upstream_error", `The upstream answered ${answer.head.status}.`, null, "upstream_error");
      return JSON.parse(utf8.decode(answer.body)) as UpstreamAnswer;
    } catch (e) {
      if (scope.aborted) return new ApiError(504, "upstream_error", "The upstream did not answer in time.", null, "timeout");
      return new ApiError(502, "upstream_error", `The upstream could not be reached (${e instanceof Error ? e.name : "error"}).`, null, "upstream_error");
    } finally {
      clearTimeout(timer);
    }
  }

  const app = new Elysia({ precompile: true })
    // Validation failures in OpenAI's error shape (the only errors the route does not answer itself).
    .onError(({ code, error }) => {
      if (code === "VALIDATION") return errorResponse(badRequest(`Invalid request: ${error.message.split("\n")[0]}`, null, "invalid_value"));
      if (error instanceof ApiError) return errorResponse(error);
    })
    .get("/metrics", async () => new Response(await registry.metrics(), { headers: { "content-type": registry.contentType } }))
    .post(
      ROUTE,
      async ({ body, request }) => {
        const state = states.get(request);
        const owner = state?.owner ?? benchOwner;
        if (body.model !== FLOOR_MODEL) return errorResponse(modelNotFound(body.model));
        const id = newTimeOrderedId("req_");
        const startedAt = Date.now();
        const started = performance.now();
        if (state) {
          state.id = id;
          state.model = body.model;
        }
        const answer = await callUpstream(body.messages);
        const latencyMs = Math.round(performance.now() - started);
        const choice = answer instanceof ApiError ? undefined : answer.choices?.[0];
        const content = choice?.message?.content;
        const finish = choice?.finish_reason;
        const usage = answer instanceof ApiError ? undefined : answer.usage;
        const failure =
          answer instanceof ApiError
            ? answer
            : typeof content !== "string" || typeof finish !== "string" || !FINISH_REASONS.has(finish) || typeof usage?.prompt_tokens !== "number" || typeof usage.completion_tokens !== "number"
              ? new ApiError(502, "upstream_error", "The upstream's answer is not a chat completion.", null, "upstream_error")
              : undefined;
        if (state) state.outcome = failure ? "failed" : "succeeded";
        if (withHistory) {
          store.requests.recordChat(
            {
              id, userId: owner.userId, keyId: owner.keyId, model: body.model, status: failure ? "failed" : "succeeded",
              prompt: historyPromptOf(chatMessagesFrom(body.messages)),
              promptTokens: failure ? null : (usage!.prompt_tokens as number), completionTokens: failure ? null : (usage!.completion_tokens as number),
              generationMs: latencyMs, queueMs: 0, errorCode: failure?.errorCode ?? null, errorMessage: failure?.message ?? null,
              upstreamId: "mock", accountId: "a", attempts: 1, upstreamLatencyMs: latencyMs,
            },
            Date.now(),
          );
        }
        if (failure) return errorResponse(failure);
        const promptTokens = usage!.prompt_tokens as number;
        const completionTokens = usage!.completion_tokens as number;
        return {
          id,
          object: "chat.completion" as const,
          created: Math.floor(startedAt / 1000),
          model: body.model,
          choices: [{ index: 0, message: { role: "assistant" as const, content: content as string, refusal: null }, logprobs: null, finish_reason: finish as "stop" }],
          usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
        };
      },
      withResponseSchema ? { body: ChatCompletionRequest, response: { 200: ChatCompletion } } : { body: ChatCompletionRequest },
    );

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const started = performance.now();
      let state: RequestState | undefined;
      let response: Response;
      if (withKey) {
        const auth = request.headers.get("authorization");
        const owner = auth?.startsWith("Bearer ") ? keys.get(hashApiKey(auth.slice(7))) : undefined;
        if (owner) states.set(request, (state = { owner }));
      }
      if (withKey && !state) response = errorResponse(unauthorized("Incorrect API key provided.", "invalid_api_key"));
      // GET is only the metrics scrape: neither logged nor counted (the bench compares the chat lines with the rows).
      else if (request.method === "GET") return app.handle(request);
      else response = await app.handle(request);
      const durationMs = performance.now() - started;
      if (withMetrics) metrics.observe(ROUTE, request.method, response.status, durationMs / 1000);
      if (withLog) {
        accessLog.info("request", {
          request_id: state?.id ?? null,
          method: request.method,
          path: ROUTE,
          status: response.status,
          duration_ms: Math.round(durationMs * 10) / 10,
          user_id: state?.owner.userId ?? null,
          key_prefix: state?.owner.keyPrefix ?? null,
          model: state?.model ?? null,
          credits_charged: 0,
          credits_refunded: 0,
          upstream: state?.model ? "mock/a" : null,
          outcome: state?.outcome ?? null,
        });
      }
      return response;
    },
  });
  console.log(`port ${server.port}`);

  return async () => {
    await server.stop();
    // Writes the queued history rows, then closes the database.
    await store.close();
    logSink.flush();
    closeSync(logFd);
  };
}
