/**
 * One webhook attempt: a signed POST to the pinned address (webhooksTarget, pinnedFetch), answered
 * within the attempt's time limit. A 2xx is success; redirects are never followed (the spec: a 3xx
 * is a failure, the user should fix the URL), and no proxy from the environment is used (the
 * request must go to the address that was checked). At most MAX_RESPONSE_BYTES of the answer are read,
 * and its first characters kept to show in the workbench.
 */
import { fetchPinned, type PinnedTarget } from "./pinnedFetch";
import { attemptErrorText } from "./webhooksAttemptError";

/** Bytes of an answer read before the connection is dropped. */
export const MAX_RESPONSE_BYTES = 64 * 1024;
/** Characters of an error answer kept with the attempt. */
const RESPONSE_EXCERPT_CHARS = 200;

export const WEBHOOK_USER_AGENT = "Atelier-Webhooks/1";

export interface AttemptAnswer {
  /** 2xx. */
  ok: boolean;
  /** The HTTP status, or null when no answer came. */
  status: number | null;
  /** Why it failed, for the user; null on success. */
  error: string | null;
  /** 410 Gone: the receiver wants no more of these. */
  gone: boolean;
}

/** Reads at most `limit` bytes of the body, then lets the rest go. */
async function readBounded(response: Response, limit: number): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  return new TextDecoder().decode(Buffer.concat(chunks).subarray(0, limit));
}

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > RESPONSE_EXCERPT_CHARS ? `${flat.slice(0, RESPONSE_EXCERPT_CHARS)}…` : flat;
}

/** POSTs `body` with `headers` to the pinned target; never throws. */
export async function postWebhook(target: PinnedTarget, headers: Record<string, string>, body: string, timeoutMs: number): Promise<AttemptAnswer> {
  const init: BunFetchRequestInit = {
    method: "POST",
    headers: { ...headers, "content-type": "application/json", "user-agent": WEBHOOK_USER_AGENT },
    body,
    signal: AbortSignal.timeout(timeoutMs),
  };
  try {
    const response = await fetchPinned(target, init);
    const text = await readBounded(response, MAX_RESPONSE_BYTES).catch(() => "");
    const status = response.status;
    if (status >= 200 && status < 300) return { ok: true, status, error: null, gone: false };
    if (status >= 300 && status < 400) {
      const location = response.headers.get("location");
      return { ok: false, status, error: attemptErrorText.redirect(status, location ? excerpt(location) : null), gone: false };
    }
    const said = excerpt(text);
    return { ok: false, status, error: attemptErrorText.status(status, said), gone: status === 410 };
  } catch (e) {
    const name = (e as Error).name;
    if (name === "TimeoutError" || name === "AbortError") return { ok: false, status: null, error: attemptErrorText.timeout(timeoutMs), gone: false };
    const code = (e as { code?: string }).code;
    return { ok: false, status: null, error: attemptErrorText.connection(code, excerpt((e as Error).message ?? String(e))), gone: false };
  }
}
