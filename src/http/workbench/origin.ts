/**
 * Same-origin checks that back the CSRF tokens: a state-changing request from a browser must
 * come from our own pages. Browsers send Sec-Fetch-Site and (on POST) Origin; a request from a
 * non-browser client sends neither and carries no ambient credentials worth forging.
 */
import type { Config } from "../../config";

function hostOf(url: string): string | null {
  try {
    return new URL(url).host.toLowerCase();
  } catch {
    return null;
  }
}

export function isSameOrigin(request: Request, config: Config): boolean {
  const site = request.headers.get("sec-fetch-site");
  if (site !== null && site !== "same-origin" && site !== "none") return false;
  const origin = request.headers.get("origin");
  if (origin === null) return true;
  if (origin === "null") return false;
  const from = hostOf(origin);
  if (from === null) return false;
  const own = new Set<string>();
  const host = request.headers.get("host");
  if (host) own.add(host.toLowerCase());
  const requestHost = hostOf(request.url);
  if (requestHost) own.add(requestHost);
  if (config.server.public_url) {
    const publicHost = hostOf(config.server.public_url);
    if (publicHost) own.add(publicHost);
  }
  return own.has(from);
}

