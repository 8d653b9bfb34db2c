/**
 * CORS: only the API (/v1) is cross-origin, for any origin and without credentials; the
 * workbench stays same-origin. A `*` in Allow-Headers does not cover Authorization, so a
 * preflight's requested headers are echoed; the headers the openai clients act on are exposed.
 */
import { cors } from "@elysiajs/cors";
import { Elysia } from "elysia";
import { pathOf } from "./requestMeta";

export const EXPOSED_HEADERS = "x-request-id, retry-after, retry-after-ms, x-should-retry, x-queue-time-ms, x-image-id";

const isApiPath = (path: string) => path.startsWith("/v1/");

const ALLOWED_METHODS = "GET, POST, OPTIONS";
/** How long a browser may reuse a preflight's answer, in seconds. */
const PREFLIGHT_MAX_AGE = "600";

/**
 * A preflight (OPTIONS) answer: 204, no body; nothing is allowed outside /v1. Ours rather than
 * the plugin's, which answers a preflight that asks for no headers with the string "undefined"
 * in Allow-Headers.
 */
function preflight(request: Request): Response {
  const headers: Record<string, string> = { vary: "Origin" };
  if (isApiPath(pathOf(request))) {
    headers["access-control-allow-origin"] = request.headers.get("origin") ?? "*";
    headers["access-control-expose-headers"] = EXPOSED_HEADERS;
    if (request.headers.has("access-control-request-method")) headers["access-control-allow-methods"] = ALLOWED_METHODS;
    // Echoed only when asked for: no value rather than an empty or made-up one.
    const requested = request.headers.get("access-control-request-headers");
    if (requested) headers["access-control-allow-headers"] = requested;
    headers["access-control-max-age"] = PREFLIGHT_MAX_AGE;
  }
  return new Response(null, { status: 204, headers });
}

/**
 * CORS for the app's routes: preflights answered by our hook (registered first, so it answers
 * before the plugin sees them), every other answer's headers by @elysiajs/cors.
 */
export function apiCors() {
  const answerPreflight = ({ request }: { request: Request }) => preflight(request);
  return new Elysia({ name: "cors" })
    .onRequest(function corsPreflight({ request }) {
      if (request.method === "OPTIONS") return preflight(request);
    })
    // Routes, so that OPTIONS is a known method of every path (the hook answers before they run).
    .options("/", answerPreflight)
    .options("/*", answerPreflight)
    .use(
      cors({
        origin: (request: Request) => isApiPath(pathOf(request)),
        // Allow-Methods and Allow-Headers mean something only in a preflight's answer, which our
        // hook makes (echoing the headers asked for); set here, they went out on every answer
        // (`allowedHeaders: true` listed each request's own header names). The plugin's code reads
        // `false` as "send none" for both (its types list only true, a string or a list for headers).
        methods: false,
        allowedHeaders: false as unknown as string,
        exposeHeaders: EXPOSED_HEADERS,
        credentials: false,
        maxAge: 600,
        preflight: false,
      }),
    );
}

/**
 * The CORS headers of an error answer made outside the plugin's reach (the app's onError, the
 * server's answers before the app), so a browser calling /v1 can still read it.
 */
export function corsHeadersForError(request: Request, path: string | undefined): Record<string, string> {
  if (path === undefined || !isApiPath(path)) return {};
  return { "access-control-allow-origin": request.headers.get("origin") ?? "*", "access-control-expose-headers": EXPOSED_HEADERS };
}
