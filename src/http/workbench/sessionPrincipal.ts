/**
 * The workbench playground calls /v1 with its session cookie instead of a key. That is only
 * allowed from our own pages: same origin (Sec-Fetch-Site / Origin), and every POST carries the
 * session's CSRF token in `x-csrf-token`.
 */
import type { Config } from "../../config";
import type { Workbench } from "./workbench";
import { isSameOrigin } from "./origin";
import { tokensEqual } from "../../core/digest";
import type { Principal } from "../auth";
import { forbidden } from "../errors";

export const CSRF_HEADER = "x-csrf-token";

export function sessionPrincipalResolver(workbench: Workbench, config: Config): (request: Request) => Promise<Principal | null> {
  return async (request) => {
    const session = await workbench.sessions.current(request);
    if (!session) return null;
    if (!isSameOrigin(request, config)) {
      throw forbidden("A workbench session can only be used from the workbench itself; other origins must send an API key.", "cross_origin_session");
    }
    const safe = request.method === "GET" || request.method === "HEAD";
    if (!safe && !tokensEqual(request.headers.get(CSRF_HEADER), session.csrf_token)) {
      throw forbidden(`Missing or invalid CSRF token: send the page's token in the ${CSRF_HEADER} header.`, "csrf_token_invalid");
    }
    const u = session.user;
    return { userId: u.id, keyId: null, email: u.email, role: u.role, via: "session" };
  };
}
