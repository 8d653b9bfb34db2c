/**
 * Who may use a workbench route, as Elysia macros on the route:
 *
 *   { viewer: true }      a signed-in user; the handler gets `viewer`
 *   { admin: true }       a signed-in admin; the handler gets `viewer`
 *   { sameOrigin: true }  a form posted before there is a session (sign-in, sign-up, setup)
 *
 * Without a session a GET goes to /signin?next=<path> and any other method gets a 403 page. A
 * state-changing request (anything but GET and HEAD) must also come from our own origin and
 * carry the session's CSRF token in its `_csrf` field: the guard checks that itself, so no
 * route can forget it.
 */
import { Elysia, status } from "elysia";
import type { Services } from "../../services";
import type { Viewer } from "../../workbench/layout";
import { metaOf } from "../requestMeta";
import { isSameOrigin } from "./origin";
import { tokensEqual } from "../../core/digest";
import { csrfRejected, formFields, problemPage, redirect } from "./respond";
import { translatorFor } from "./locale";

/** The signed-in viewer, or null. */
export async function viewerOf(services: Services, request: Request): Promise<Viewer | null> {
  const s = await services.workbench.sessions.current(request);
  if (!s) return null;
  metaOf(request).userId = s.user.id;
  return { user: s.user, csrf: s.csrf_token, t: translatorFor(request) };
}

export type Guarded = { viewer: Viewer; response?: undefined } | { viewer?: undefined; response: Response };

const isSafeMethod = (request: Request) => request.method === "GET" || request.method === "HEAD";

/** A session (and the admin role if asked): otherwise back to sign-in (GET) or 403. */
async function signedIn(services: Services, request: Request, admin: boolean): Promise<Guarded> {
  const viewer = await viewerOf(services, request);
  if (!viewer) {
    if (request.method === "GET") return { response: redirect(`/signin?next=${encodeURIComponent(new URL(request.url).pathname)}`) };
    const t = translatorFor(request);
    return { response: problemPage(t, 403, t("common.signedOut.title"), t("common.signedOut.text")) };
  }
  const t = viewer.t;
  if (admin && viewer.user.role !== "admin") return { response: problemPage(viewer, 403, t("common.adminsOnly.title"), t("common.adminsOnly.text")) };
  return { viewer };
}

/**
 * The viewer of a request, or the refusal to send: the session (and role) for every request,
 * and for a state-changing one first the origin, then the session's token in `_csrf`.
 */
export async function checkViewer(services: Services, request: Request, body: unknown, opts: { admin?: boolean } = {}): Promise<Guarded> {
  if (isSafeMethod(request)) return signedIn(services, request, opts.admin ?? false);
  if (!isSameOrigin(request, services.config)) return { response: csrfRejected(translatorFor(request)) };
  const guarded = await signedIn(services, request, opts.admin ?? false);
  if (guarded.response) return guarded;
  if (!tokensEqual(formFields(body)._csrf, guarded.viewer.csrf)) return { response: csrfRejected(guarded.viewer.t) };
  return guarded;
}

/** The macros; `.use()` them in every workbench route plugin. */
export function workbenchGuards(services: Services) {
  const resolveViewer = async (request: Request, body: unknown, admin: boolean) => {
    const g = await checkViewer(services, request, body, { admin });
    // status() is how a resolve ends the request early; the page keeps its own headers.
    if (g.response) return status(g.response.status, g.response);
    return { viewer: g.viewer };
  };
  return new Elysia({ name: "workbench.guards" }).macro({
    viewer: { resolve: ({ request, body }) => resolveViewer(request, body, false) },
    admin: { resolve: ({ request, body }) => resolveViewer(request, body, true) },
    sameOrigin: {
      beforeHandle: ({ request }) => {
        if (!isSameOrigin(request, services.config)) return csrfRejected(translatorFor(request));
      },
    },
  });
}
