/**
 * Per-request facts that the outer server wrapper, the Elysia hooks and the logger share:
 * the request id (also echoed as x-request-id), the start time and, once known, the user.
 */
import { newTimeOrderedId } from "../core/ids";
import type { Principal } from "./auth";
import type { BodyRules } from "./body";
import { badRequest } from "./errors";

export interface RequestMeta {
  id: string;
  startedAt: number;
  userId?: number;
  /** Who the caller is, once authenticated: later steps of the same request reuse it. */
  principal?: Principal;
  /** The authentication under way or done (http/auth): every step of the request shares its answer or refusal. */
  authenticated?: Promise<Principal>;
  /**
   * The peer address as the socket saw it, looked up on first use (set by the server wrapper;
   * absent under app.handle()): only the sign-in and redemption forms need it, every request would pay.
   */
  clientAddress?: () => string | undefined;
  /** The URL's path, parsed once for the hooks that route on it (CORS, 405, logging). */
  path?: string;
  /** The route pattern Elysia matched (e.g. /v1/images/tasks/:id), for metrics labels; unset when none matched. */
  route?: string;
  /** Bytes reserved in the body budget for this request; released when the response is done. */
  reservedBodyBytes: number;
  /** The request has a body that nobody has read to the end (so far): the answer must close the connection. */
  bodyUnread?: boolean;
  /** Set when guardBody left a small declared body unwrapped: its reader must apply these rules (http/body readSmallBody). */
  smallBody?: BodyRules;
}

const metas = new WeakMap<Request, RequestMeta>();

export function attachMeta(request: Request, now = performance.now()): RequestMeta {
  const meta: RequestMeta = { id: newTimeOrderedId("req_"), startedAt: now, reservedBodyBytes: 0 };
  metas.set(request, meta);
  return meta;
}

/** A request rebuilt from another (e.g. with a guarded body) keeps the same meta. */
export function shareMeta(from: Request, to: Request): void {
  metas.set(to, metaOf(from));
}

/** The meta of a request; one is created on first use (e.g. app.handle() in unit tests). */
export function metaOf(request: Request): RequestMeta {
  return metas.get(request) ?? attachMeta(request);
}

/**
 * The request's path, parsed from its URL once per request. Bun gives a relative URL when the
 * Host header is missing (HTTP/1.0) or malformed (\`Host: a b\`): that is the client's error.
 */
export function pathOf(request: Request): string {
  const meta = metaOf(request);
  if (meta.path !== undefined) return meta.path;
  const path = pathOfAbsoluteUrl(request.url);
  if (path !== undefined) return (meta.path = path);
  let url: URL;
  try {
    url = new URL(request.url);
  } catch {
    throw badRequest("The Host header is missing or malformed; send the server's host name, e.g. 'Host: atelier.example.com'.", null, "invalid_host");
  }
  return (meta.path = url.pathname);
}

/**
 * The path of an absolute URL as a Request holds it, without building a URL object (a
 * noticeable share of a short request). Request URLs are already parsed and normalised (dot
 * segments resolved, backslashes turned, non-ASCII percent-encoded), by Bun for the socket's
 * requests and by the Request constructor otherwise, so the path is the text from the first
 * slash after the authority to the query or fragment: what `new URL(url).pathname` gives.
 * Undefined for anything else (a relative URL), which URL then parses or refuses.
 */
export function pathOfAbsoluteUrl(url: string): string | undefined {
  const scheme = url.indexOf("://");
  if (scheme <= 0 || !url.startsWith("http")) return undefined;
  const start = url.indexOf("/", scheme + 3);
  if (start < 0) return undefined;
  let end = url.length;
  const query = url.indexOf("?", start);
  if (query >= 0) end = query;
  const fragment = url.indexOf("#", start);
  if (fragment >= 0 && fragment < end) end = fragment;
  return url.slice(start, end);
}
