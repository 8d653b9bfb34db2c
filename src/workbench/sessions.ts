/**
 * Browser sessions: a random 256-bit id in an HttpOnly SameSite=Lax cookie; the database keeps
 * only its SHA-256 with the user, a per-session CSRF token and an expiry.
 */
import type { Config } from "../config";
import type { Clock } from "../core/accounts";
import { randomBase62 } from "../core/apiKeys";
import type { SessionStore, SessionWithUser } from "../store/sessions";

export const SESSION_COOKIE = "atelier_session";

export function hashSessionId(id: string): string {
  return new Bun.CryptoHasher("sha256").update(id).digest("hex");
}

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

export class SessionManager {
  constructor(
    private readonly sessions: SessionStore,
    private readonly config: Config,
    private readonly clock: Clock,
  ) {}

  /** Starts a session; returns the Set-Cookie value. */
  start(userId: number, request: Request): { cookie: string; csrf: string } {
    const id = randomBase62(43);
    const csrf = randomBase62(32);
    const now = this.clock();
    const ttlMs = this.config.workbench.session_ttl_hours * 3_600_000;
    this.sessions.deleteExpired(now);
    this.sessions.create({ id_hash: hashSessionId(id), user_id: userId, csrf_token: csrf, created_at: now, expires_at: now + ttlMs });
    return { cookie: this.cookie(id, Math.floor(ttlMs / 1000), request), csrf };
  }

  /** The signed-in session of a request, or null (no cookie, unknown, expired, or a disabled user). */
  current(request: Request): SessionWithUser | null {
    const id = readCookie(request, SESSION_COOKIE);
    if (!id || id.length > 100) return null;
    const found = this.sessions.find(hashSessionId(id), this.clock());
    if (!found || found.user.disabled) return null;
    return found;
  }

  /** Ends the request's session; returns the Set-Cookie value that clears the cookie. */
  end(request: Request): string {
    const id = readCookie(request, SESSION_COOKIE);
    if (id) this.sessions.delete(hashSessionId(id));
    return this.cookie("", 0, request);
  }

  endAllFor(userId: number): void {
    this.sessions.deleteForUser(userId);
  }

  private cookie(value: string, maxAgeS: number, request: Request): string {
    const secure = cookieIsSecure(this.config, request) ? "; Secure" : "";
    return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeS}${secure}`;
  }
}
