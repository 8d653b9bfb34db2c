/**
 * The workbench session as a cookie: the session id in an HttpOnly SameSite=Lax cookie, Secure
 * when the page is served over https. What a session is lives in core/sessions.ts.
 */
import type { Config } from "../../config";
import type { Sessions, SessionWithUser } from "../../core/sessions";

export const SESSION_COOKIE = "atelier_session";

export function readCookie(request: Request, name: string): string | null {
  const header = request.headers.get("cookie");
  if (!header) return null;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() !== name) continue;
    // A malformed escape (`%zz`) is someone else's garbage, not a reason to fail the request: no session.
    try {
      return decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      return null;
    }
  }
  return null;
}

/** Whether cookies get `Secure`: always/never from config, or (auto) when the page is served over https. */
export function cookieIsSecure(config: Config, request: Request): boolean {
  const mode = config.workbench.secure_cookies;
  if (mode !== "auto") return mode === "always";
  if (config.server.public_url?.startsWith("https://")) return true;
  return new URL(request.url).protocol === "https:" || request.headers.get("x-forwarded-proto") === "https";
}

export class SessionCookies {
  constructor(
    private readonly sessions: Sessions,
    private readonly config: Config,
  ) {}

  /** Starts a session; returns the Set-Cookie value and the session's CSRF token. */
  async start(userId: number, request: Request): Promise<{ cookie: string; csrf: string }> {
    const { id, csrf, ttlMs } = await this.sessions.start(userId);
    return { cookie: this.cookie(id, Math.floor(ttlMs / 1000), request), csrf };
  }

  /** The signed-in session of a request, or null (no cookie, unknown, expired, or a disabled user). */
  async current(request: Request): Promise<SessionWithUser | null> {
    const id = readCookie(request, SESSION_COOKIE);
    return id ? this.sessions.find(id) : null;
  }

  /** Ends the request's session; returns the Set-Cookie value that clears the cookie. */
  async end(request: Request): Promise<string> {
    const id = readCookie(request, SESSION_COOKIE);
    if (id) await this.sessions.end(id);
    return this.cookie("", 0, request);
  }

  endAllFor(userId: number): Promise<void> {
    return this.sessions.endAllFor(userId);
  }

  private cookie(value: string, maxAgeS: number, request: Request): string {
    const secure = cookieIsSecure(this.config, request) ? "; Secure" : "";
    return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeS}${secure}`;
  }
}
