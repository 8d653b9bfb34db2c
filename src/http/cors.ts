/**
 * CORS: only the API (/v1) is cross-origin, for any origin and without credentials; the
 * workbench stays same-origin. A `*` in Allow-Headers does not cover Authorization, so a
 * preflight's requested headers are echoed; the headers the openai clients act on are exposed.
 */
import { cors } from "@elysiajs/cors";
import { pathOf } from "./requestMeta";

export const EXPOSED_HEADERS = "x-request-id, retry-after, retry-after-ms, x-should-retry, x-queue-time-ms, x-image-id";

const isApiPath = (path: string) => path.startsWith("/v1/");

/** The plugin for the app's routes (preflights and successful answers). */
export function apiCors() {
  return cors({
    origin: (request: Request) => isApiPath(pathOf(request)),
    methods: ["GET", "POST", "OPTIONS"],
    allowedHeaders: true,
    exposeHeaders: EXPOSED_HEADERS,
    credentials: false,
    maxAge: 600,
  });
}

/**
 * The CORS headers of an error answer made outside the plugin's reach (the app's onError, the
 * server's answers before the app), so a browser calling /v1 can still read it.
 */
export function corsHeadersForError(request: Request, path: string | undefined): Record<string, string> {
  if (path === undefined || !isApiPath(path)) return {};
  return { "access-control-allow-origin": request.headers.get("origin") ?? "*", "access-control-expose-headers": EXPOSED_HEADERS };
}
