/**
 * URLs of the servers Atelier talks to (PostgreSQL, Redis) carry their password: these name
 * where a server is, and pass on what a driver said about it, without ever showing it.
 */

/** `host:port/path` of a server's URL (with `scheme://` first when asked), never its user or password; null when it does not parse. */
export function serverAddress(url: string, withScheme = false): string | null {
  try {
    const u = new URL(url);
    return `${withScheme ? `${u.protocol}//` : ""}${u.hostname}${u.port ? `:${u.port}` : ""}${u.pathname.length > 1 ? u.pathname : ""}`;
  } catch {
    return null;
  }
}

/**
 * `text` (a driver's words about the server at `url`), unless it contains the URL's password in
 * any spelling (as the URL writes it, decoded, or encoded again): drivers do not echo it today,
 * but that is not promised.
 */
export function withheldIfHoldsPassword(text: string, url: string): string {
  let written = "";
  try {
    written = new URL(url).password;
  } catch {}
  if (!written) return text;
  let decoded = written;
  try {
    decoded = decodeURIComponent(written);
  } catch {}
  const spellings = [written, decoded, encodeURIComponent(decoded)];
  return spellings.some((p) => text.includes(p)) ? "(details withheld: they contain the password)" : text;
}
