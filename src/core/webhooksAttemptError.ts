/**
 * The error text stored with a failed webhook attempt (and a delivery's last_error), written
 * here and read back here: the text is English for the log and the database, and
 * `classifyAttemptError` turns it back into a category with its parameters so the workbench can
 * word it in the page's language. Rows written before a category existed come back as "other".
 */

/** The stored text when the endpoint is removed with deliveries still waiting (store/webhooks writes it in SQL). */
export const ENDPOINT_REMOVED = "the endpoint was removed";
export const SECRET_UNREADABLE = "the signing secret cannot be opened with this server's key: rotate it on the Webhooks page";
export const NO_SECRET = "no signing secret: create one on the Webhooks page";

export const attemptErrorText = {
  redirect: (status: number, location: string | null) => `HTTP ${status}: redirects are not followed${location ? ` (to ${location})` : ""}; set the final URL`,
  status: (status: number, said: string) => `HTTP ${status}${said ? `: ${said}` : ""}`,
  timeout: (ms: number) => `no answer within ${ms} ms`,
  connection: (code: string | undefined, message: string) => `connection failed${code ? ` (${code})` : ""}: ${message}`,
  notSent: (refused: string) => `not sent: ${refused}`,
};

/** A stored attempt error by category; `detail` is raw technical text (an answer, a system message), shown as is. */
export type AttemptError =
  | { kind: "redirect"; status: number; detail: string | null }
  | { kind: "status"; status: number; detail: string | null }
  | { kind: "timeout"; ms: number }
  | { kind: "refused_connection"; detail: string }
  | { kind: "connection"; detail: string }
  | { kind: "not_sent"; detail: string }
  | { kind: "endpoint_removed" }
  | { kind: "secret_unreadable" }
  | { kind: "no_secret" }
  | { kind: "other"; detail: string };

export function classifyAttemptError(text: string): AttemptError {
  if (text === ENDPOINT_REMOVED) return { kind: "endpoint_removed" };
  if (text === SECRET_UNREADABLE) return { kind: "secret_unreadable" };
  if (text === NO_SECRET) return { kind: "no_secret" };
  let m = /^HTTP (\d{3}): redirects are not followed(?: \(to ([\s\S]*)\))?; set the final URL$/.exec(text);
  if (m) return { kind: "redirect", status: Number(m[1]), detail: m[2] ?? null };
  m = /^HTTP (\d{3})(?:: ([\s\S]*))?$/.exec(text);
  if (m) return { kind: "status", status: Number(m[1]), detail: m[2] ?? null };
  m = /^no answer within (\d+) ms$/.exec(text);
  if (m) return { kind: "timeout", ms: Number(m[1]) };
  m = /^connection failed(?: \((\w+)\))?: ([\s\S]*)$/.exec(text);
  if (m) return m[1] === "ECONNREFUSED" || m[1] === "ConnectionRefused" ? { kind: "refused_connection", detail: m[2]! } : { kind: "connection", detail: `${m[1] ? `${m[1]}: ` : ""}${m[2]}` };
  m = /^not sent: ([\s\S]*)$/.exec(text);
  if (m) return { kind: "not_sent", detail: m[1]! };
  return { kind: "other", detail: text };
}
