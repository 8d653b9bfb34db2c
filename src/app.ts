/**
 * createApp(deps) wires the Elysia side together. It never listens: tests and the server
 * (src/server.ts) both hand requests to it.
 */
import { Elysia } from "elysia";
import { cors } from "@elysiajs/cors";
import { openapi } from "@elysiajs/openapi";
import type { Config } from "./config";
import { KeyAuthenticator, type Clock } from "./core/accounts";
import { BackgroundWork } from "./core/background";
import { EngineRegistry } from "./engines/registry";
import { registerUpstreamEngines, type UpstreamPools } from "./engines/upstreams";
import { adminUpstreamsRoutes } from "./http/admin/upstreams";
import { LocalGate, type Gate } from "./core/gate";
import { ModelCatalog } from "./core/models";
import type { Logger } from "./logger";
import type { Store } from "./store";
import { BodyBudget } from "./http/body";
import { docsRoutes } from "./http/docs";
import { DatabaseBusyError, isDatabaseBusy } from "./store/busy";
import { ApiError, badRequest, databaseBusy, errorResponse, methodNotAllowed, notFound, paramFromPointer, serverError } from "./http/errors";
import { opsRoutes } from "./http/ops";
import { polishOpenApiDocument } from "./http/openapiDocument";
import { metaOf, pathOf } from "./http/requestMeta";
import { modelsRoutes } from "./http/v1/models";
import { chatRoutes } from "./http/v1/chat";
import { BuiltinChatEngine } from "./engines/builtin/chatEngine";
import { BuiltinImageEngine } from "./engines/builtin/imageEngine";
import { imagesRoutes } from "./http/v1/images";
import type { ApiAuthDeps } from "./http/auth";
import { workbenchRoutes } from "./http/workbench";
import { sessionPrincipalResolver } from "./http/workbench/sessionPrincipal";
import { createWorkbench, type Workbench } from "./workbench/service";

export const API_VERSION = "1.0.0";

export interface AppDeps {
  config: Config;
  store: Store;
  logger: Logger;
  clock?: Clock;
}

/** Everything the routes share, built once from AppDeps. */
export interface Services {
  config: Config;
  store: Store;
  logger: Logger;
  clock: Clock;
  catalog: ModelCatalog;
  budget: BodyBudget;
  auth: ApiAuthDeps;
  background: BackgroundWork;
  engines: EngineRegistry;
  /** Workbench sessions, sign-in and the first-admin setup token. */
  workbench: Workbench;
  /** One account pool per [[upstreams]] entry (its engine is registered in `engines`). */
  upstreams: UpstreamPools;
  /** The image concurrency gate, built from [limits]. */
  gate: Gate;
}

/** builtin-chat answers for models whose upstream is "builtin"; upstream chat engines register by upstream id. */
function withBuiltinChat(engines: EngineRegistry): EngineRegistry {
  engines.registerChat("builtin", new BuiltinChatEngine());
  return engines;
}

export function createServices(deps: AppDeps): Services {
  const clock = deps.clock ?? Date.now;
  const workbench = createWorkbench({ config: deps.config, store: deps.store, clock, logger: deps.logger });
  const services: Omit<Services, "upstreams"> = {
    config: deps.config,
    store: deps.store,
    logger: deps.logger,
    clock,
    catalog: new ModelCatalog(deps.config),
    budget: new BodyBudget(deps.config.server.max_body_bytes, deps.config.server.max_inflight_body_bytes),
    auth: { keys: new KeyAuthenticator(deps.store, clock), sessionPrincipal: sessionPrincipalResolver(workbench, deps.config) },
    workbench,
    background: new BackgroundWork(),
    engines: withBuiltinChat(new EngineRegistry()),
    gate: new LocalGate({
      global: deps.config.limits.generation_concurrency,
      perUser: deps.config.limits.per_user_concurrency,
      queueSize: deps.config.limits.queue_size,
      queueTimeoutMs: deps.config.limits.queue_timeout_ms,
    }),
  };
  // builtin-image draws offline for models whose upstream is "builtin".
  services.engines.registerImage("builtin", new BuiltinImageEngine());
  const upstreams = registerUpstreamEngines(deps.config, services.engines, { store: deps.store.upstreams, clock, logger: deps.logger });
  return { ...services, upstreams };
}

export const EXPOSED_HEADERS = "x-request-id, retry-after, retry-after-ms, x-should-retry, x-queue-time-ms";

/** Turns Elysia's route table into matchers, to tell 405 (path exists) from 404. */
function routeMatchers(app: Elysia): { method: string; test: (path: string) => boolean }[] {
  return app.routes
    .filter((r) => r.method !== "OPTIONS" && !r.path.includes("*"))
    .map((r) => {
      const pattern = new RegExp(`^${r.path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/:[^/]+/g, "[^/]+")}/?$`);
      return { method: r.method, test: (p: string) => pattern.test(p) };
    });
}

/** Maps any thrown value to our error shape; logs the unexpected ones with the request id. */
function toApiError(code: string | number, error: unknown, request: Request, logger: Logger, allowed: () => string[]): ApiError {
  if (error instanceof ApiError) return error;
  if (isDatabaseBusy(error) || error instanceof DatabaseBusyError) return databaseBusy();
  // Elysia wraps whatever a parse hook throws (our 413/415/400 from acceptBody) in a ParseError.
  if (code === "PARSE" && error instanceof Error && error.cause instanceof ApiError) return error.cause;
  // Our own answer failed its response schema: a bug on our side, not the client's 400.
  if (code === "VALIDATION" && (error as { type?: string }).type === "response") {
    // Only where and which rule: the values could be anything, a freshly created key included.
    const first = (error as { all?: { path: string; message: string }[] }).all?.[0];
    logger.error("response failed its schema", { request_id: metaOf(request).id, path: first?.path ?? null, rule: first?.message ?? null });
    return serverError();
  }
  if (code === "VALIDATION") {
    const v = error as { all?: { path: string; message: string; summary?: string }[]; type?: string };
    const first = v.all?.[0];
    const param = first ? paramFromPointer(first.path) : null;
    // A schema may state its rule in words (`error: "must be a number from 0 to 2"`); prefer that.
    const stated = (first as { schema?: { error?: unknown } } | undefined)?.schema?.error;
    const rule = (typeof stated === "string" ? stated : undefined) ?? first?.message ?? "invalid value";
    const where = v.type === "body" || !v.type ? "" : ` in ${v.type}`;
    return badRequest(param ? `Invalid '${param}'${where}: ${rule}.` : `Invalid request${where}: ${rule}.`, param, "invalid_value");
  }
  if (code === "PARSE") return badRequest("We could not parse the body of your request; send valid JSON with Content-Type: application/json.", null, "invalid_json");
  if (code === "NOT_FOUND") {
    const path = pathOf(request);
    const methods = allowed();
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

/**
 * Builds (and lets the plugin cache) the OpenAPI document before any request: compiling a
 * route adds details such as `additionalProperties` to shared models in place, so a document
 * generated later would depend on which routes had been called first.
 */
function generateOpenApiNow(app: Elysia): void {
  const route = app.routes.find((r) => r.method === "GET" && r.path === "/openapi.json");
  if (typeof route?.handler === "function") (route.handler as () => unknown)();
}

export function createApp(services: Services) {
  const { logger } = services;
  let matchers: ReturnType<typeof routeMatchers> | undefined;

  // standardHostname: false — Elysia otherwise finds the path at index 11 of the URL, which
  // misroutes every request whose Host header is shorter than 4 characters (e.g. "app").
  // precompile — compiling a route fills in schema details (`additionalProperties`) in place,
  // on models that may be module constants shared by every app in the process; compiling all
  // routes up front makes that happen before the OpenAPI document is built, every time, so the
  // document no longer depends on what ran earlier in the process.
  const app = new Elysia({ name: "atelier", handler: { standardHostname: false }, precompile: true })
    .onError({ as: "global" }, ({ code, error, request }) => {
      const allowed = () => {
        const path = pathOf(request);
        matchers ??= routeMatchers(app as unknown as Elysia);
        return [...new Set(matchers.filter((m) => m.test(path)).map((m) => m.method))];
      };
      const apiError = toApiError(code, error, request, logger, allowed);
      const res = errorResponse(apiError, { "x-request-id": metaOf(request).id });
      // CORS headers that the cors plugin set for this request would otherwise be lost.
      if (pathOf(request).startsWith("/v1/")) {
        res.headers.set("access-control-allow-origin", request.headers.get("origin") ?? "*");
        res.headers.set("access-control-expose-headers", EXPOSED_HEADERS);
      }
      return res;
    })
    .use(
      cors({
        // Only the API is cross-origin; the workbench stays same-origin.
        origin: (request: Request) => pathOf(request).startsWith("/v1/"),
        methods: ["GET", "POST", "OPTIONS"],
        allowedHeaders: true,
        exposeHeaders: EXPOSED_HEADERS,
        credentials: false,
        maxAge: 600,
      }),
    )
    .onRequest(({ request, set }) => {
      set.headers["x-request-id"] = metaOf(request).id;
    })
    // Registered before the openapi plugin so that it covers the plugin's /openapi.json route.
    .onAfterHandle({ as: "global" }, ({ request, responseValue }) => {
      if (pathOf(request) === "/openapi.json") return polishOpenApiDocument(responseValue);
    })
    .use(
      openapi({
        provider: null,
        specPath: "/openapi.json",
        exclude: { paths: ["/openapi.json"] },
        documentation: {
          info: {
            title: "Atelier API",
            version: API_VERSION,
            description:
              "OpenAI-compatible image generation and chat. Authenticate with `Authorization: Bearer sk-atl-…`. " +
              "Every accepted image request costs 1 credit and is refunded automatically if it fails; chat is free. " +
              "Errors always have the shape `{\"error\":{\"message\",\"type\",\"param\",\"code\"}}`.",
          },
          servers: [{ url: "/", description: "This server" }],
          tags: [
            { name: "Models", description: "The model catalog." },
            { name: "Images", description: "Image generation and editing (1 credit per accepted request)." },
            { name: "Chat", description: "Chat completions (free)." },
            { name: "Operations", description: "Health and readiness." },
          ],
          components: {
            securitySchemes: {
              bearerAuth: { type: "http", scheme: "bearer", description: "An API key `sk-atl-…` from the workbench or `atelier key create`." },
            },
          },
        },
      }),
    )
    .use(docsRoutes())
    .use(workbenchRoutes(services))
    .use(opsRoutes(services))
    .use(adminUpstreamsRoutes(services))
    .use(modelsRoutes(services))
    .use(chatRoutes(services))
    .use(imagesRoutes(services));

  generateOpenApiNow(app as unknown as Elysia);
  return app;
}

export type App = ReturnType<typeof createApp>;
