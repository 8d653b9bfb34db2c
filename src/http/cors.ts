/**
 * CORS: only the API (/v1) is cross-origin, for any origin and without credentials; the
 * workbench stays same-origin. A `*` in Allow-Headers does not cover Authorization, so a
 * preflight's requested headers are echoed; the headers the openai clients act on are exposed.
 * Only a request that says where it comes from (Origin: every browser's cross-origin request,
 * and its same-origin POSTs) gets Allow-Origin and Expose-Headers; a server-side client sends
 * none and reads every header anyway, so its answers carry only `Vary: Origin` (the answer
 * depends on the header, which a cache must know).
 */
import { cors } from "@elysiajs/cors";
import { Elysia } from "elysia";
import type { HookContainer } from "elysia/types";
import { pathOf } from "./requestMeta";

export const EXPOSED_HEADERS = "x-request-id, retry-after, retry-after-ms, x-should-retry, x-queue-time-ms, x-image-id";

const isApiPath = (path: string) => path.startsWith("/v1/");

/** A browser's request to the API: one whose answer needs the CORS headers. */
const isCorsApiRequest = (request: Request, path: string | undefined) => path !== undefined && isApiPath(path) && request.headers.has("origin");

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
    .onRequest(function corsPreflight({ request, set }) {
      if (request.method === "OPTIONS") return preflight(request);
      if (isCorsApiRequest(request, pathOf(request))) set.headers["access-control-expose-headers"] = EXPOSED_HEADERS;
    })
    // Routes, so that OPTIONS is a known method of every path (the hook answers before they run).
    .options("/", answerPreflight)
    .options("/*", answerPreflight)
    .use(
      cors({
        origin: (request: Request) => isCorsApiRequest(request, pathOf(request)),
        // Allow-Methods and Allow-Headers mean something only in a preflight's answer, which our
        // hook makes (echoing the headers asked for); set here, they went out on every answer
        // (`allowedHeaders: true` listed each request's own header names). The plugin's code reads
        // `false` as "send none" for both (its types list only true, a string or a list for headers).
        methods: false,
        allowedHeaders: false as unknown as string,
        // Set by the hook above, on the answers that need it (not a default header of every answer).
        exposeHeaders: false as unknown as string,
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
  if (!isCorsApiRequest(request, path)) return {};
  return { "access-control-allow-origin": request.headers.get("origin") ?? "*", "access-control-expose-headers": EXPOSED_HEADERS };
}

/** The app's request hooks: ours above and the plugin's (`processCors`, which answers nothing with `preflight: false`). */
const CORS_REQUEST_HOOKS = new Set(["corsPreflight", "processCors"]);

/**
 * Tells Elysia that the CORS request hooks answer synchronously, before it composes the app's
 * handler. Elysia guesses from a hook's source: any `return f(` (both hooks return a call's
 * value on their preflight branch) makes it `await` the hook, and one awaited hook makes the
 * composed handler async, which then also returns the route's promise from an async function.
 * On every request that was four turns of the microtask queue for hooks that never return a
 * promise (alone, behind a trivial route: 4.8–5.0 against 4.2–4.65 µs a request; README,
 * the tenth pass). Elysia reads the answer from the hook's `isAsync` (its own cache of the
 * guess, part of its HookContainer type); test/http/corsHooks.test.ts fails if a new Elysia or
 * plugin stops honouring it.
 */
export function declareCorsHooksSync(hooks: HookContainer[] | undefined): void {
  for (const hook of hooks ?? []) if (CORS_REQUEST_HOOKS.has(hook.fn.name)) hook.isAsync = false;
}
