/**
 * createApp(services) wires the Elysia side together. It never listens: tests and the server
 * (src/server.ts) both hand requests to it.
 */
import { Elysia } from "elysia";
import { openapi } from "@elysiajs/openapi";
import { adminUpstreamsRoutes } from "./http/admin/upstreams";
import { apiCors, corsHeadersForError, declareCorsHooksSync } from "./http/cors";
import { docsRoutes } from "./http/docs";
import { errorResponse } from "./http/errors";
import { toApiError } from "./http/errorMapping";
import { opsRoutes } from "./http/ops";
import { metricsRoutes } from "./http/metrics";
import { polishOpenApiDocument } from "./http/openapiDocument";
import { pathOf } from "./http/requestMeta";
import { modelsRoutes } from "./http/v1/models";
import { meRoutes } from "./http/v1/me";
import { usageRoutes } from "./http/v1/usage";
import { chatRoutes } from "./http/v1/chat";
import { imagesRoutes } from "./http/v1/images";
import { imageTasksRoutes } from "./http/v1/images/tasks";
import { imageFilesRoutes } from "./http/files";
import { workbenchRoutes } from "./http/workbench";
import { browserNotFound } from "./http/workbench/notFoundPage";
import type { Services } from "./services";
import { DEFAULT_TOP_UP_MESSAGE } from "./config";
import { VERSION } from "./version";

/** The OpenAPI document's info.version: the package version, the same as `atelier --version` and /healthz. */
export const API_VERSION = VERSION;


/** Turns Elysia's route table into matchers, to tell 405 (path exists) from 404. */
function routeMatchers(app: Elysia): { method: string; test: (path: string) => boolean }[] {
  return app.routes
    .filter((r) => r.method !== "OPTIONS" && !r.path.includes("*"))
    .map((r) => {
      const pattern = new RegExp(`^${r.path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/:[^/]+/g, "[^/]+")}/?$`);
      return { method: r.method, test: (p: string) => pattern.test(p) };
    });
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
  const wording = { topUpMessage: services.config.workbench.top_up_message || DEFAULT_TOP_UP_MESSAGE };
  let matchers: ReturnType<typeof routeMatchers> | undefined;

  // standardHostname: false — Elysia otherwise finds the path at index 11 of the URL, which
  // misroutes every request whose Host header is shorter than 4 characters (e.g. "app").
  // precompile — compiling a route fills in schema details (`additionalProperties`) in place,
  // on models that may be module constants shared by every app in the process; compiling all
  // routes up front makes that happen before the OpenAPI document is built, every time, so the
  // document no longer depends on what ran earlier in the process.
  const app = new Elysia({ name: "atelier", handler: { standardHostname: false }, precompile: true })
    .onError({ as: "global" }, async ({ error, request }) => {
      const allowed = () => {
        const path = pathOf(request);
        matchers ??= routeMatchers(app as unknown as Elysia);
        return [...new Set(matchers.filter((m) => m.test(path)).map((m) => m.method))];
      };
      const apiError = toApiError(error, request, logger, allowed, wording);
      if (apiError.errorCode === "unknown_route") {
        const page = await browserNotFound(services, request);
        if (page) return page;
      }
      // The headers the cors plugin set for this request would otherwise be lost.
      return errorResponse(apiError, corsHeadersForError(request, pathOf(request)));
    })
    .use(apiCors())
    .use(
      // A local hook of its own instance, registered before the plugin: it covers the plugin's
      // /openapi.json route and no other (as a global hook it ran, and was awaited, on every route).
      new Elysia({ name: "openapi.document" })
        .onAfterHandle(({ request, responseValue }) => {
          if (pathOf(request) === "/openapi.json") return polishOpenApiDocument(responseValue, { ...wording, maxBodyBytes: services.config.server.max_body_bytes });
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
                  "Every accepted image request costs its model's price in credits (`x_atelier_price` in `/v1/models`, 1 unless the operator set another) and is refunded automatically if it fails; chat is free. " +
                  "Errors always have the shape `{\"error\":{\"message\",\"type\",\"param\",\"code\"}}`.",
              },
              servers: [{ url: "/", description: "This server" }],
              tags: [
                { name: "Models", description: "The model catalog." },
                { name: "Images", description: "Image generation and editing (the model's price in credits per accepted request)." },
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
        ),
    )
    .use(docsRoutes())
    .use(workbenchRoutes(services))
    .use(opsRoutes(services))
    .use(metricsRoutes(services))
    .use(adminUpstreamsRoutes(services))
    .use(modelsRoutes(services))
    .use(meRoutes(services))
    .use(usageRoutes(services))
    .use(chatRoutes(services))
    .use(imagesRoutes(services))
    .use(imageTasksRoutes(services))
    .use(imageFilesRoutes(services));

  // Before anything composes the app's handler (app.fetch, on the first request).
  declareCorsHooksSync(app.event.request);
  generateOpenApiNow(app as unknown as Elysia);
  return app;
}

export type App = ReturnType<typeof createApp>;
