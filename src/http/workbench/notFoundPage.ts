/**
 * A browser that asks for a page we do not have gets an HTML 404 in the workbench's frame
 * instead of the API's JSON error. Only for requests that prefer HTML (a browser's navigation
 * sends `Accept: text/html,…`; API clients send application/json or *\/*) and never under /v1,
 * whose answers keep the OpenAI error shape whatever the client accepts.
 */
import type { Services } from "../../services";
import { pathOf } from "../requestMeta";
import { viewerOf } from "./guards";
import { translatorFor } from "./locale";
import { problemPage } from "./respond";

/** Enough of the path to recognise it; an unbounded one would only make the page bigger. */
const MAX_PATH_SHOWN = 200;

function prefersHtml(request: Request): boolean {
  const accept = request.headers.get("accept") ?? "";
  return /(^|,)\s*text\/html\s*(;|,|$)/iu.test(accept);
}

function isApiPath(path: string): boolean {
  return path === "/v1" || path.startsWith("/v1/");
}

/** The HTML 404 page for this request, or null when the JSON error is the right answer. */
export async function browserNotFound(services: Services, request: Request): Promise<Response | null> {
  if (!services.config.workbench.enabled) return null;
  if (request.method !== "GET" && request.method !== "HEAD") return null;
  const path = pathOf(request);
  if (isApiPath(path) || !prefersHtml(request)) return null;
  const shown = path.length > MAX_PATH_SHOWN ? `${path.slice(0, MAX_PATH_SHOWN)}…` : path;
  const who = (await viewerOf(services, request)) ?? translatorFor(request);
  const t = typeof who === "function" ? who : who.t;
  return problemPage(who, 404, t("common.notFound.title"), t("common.notFound.text", { path: shown }));
}
