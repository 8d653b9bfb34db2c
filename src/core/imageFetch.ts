/**
 * An input image given by URL (`reference_images[i]`, `images[i].image_url`, `mask.image_url`),
 * fetched by the server under the same acceptance as a data URL or an upload, and without
 * letting the URL reach into the server's own network:
 *
 * - http:// or https:// only, at most MAX_IMAGE_URL_CHARS, a host, no user:password part;
 * - every hop's host is resolved once and every address checked (pinnedFetch: public addresses
 *   only unless the operator allows private ones), and the request goes to the checked address;
 * - at most MAX_IMAGE_URL_REDIRECTS redirects, each Location (relative ones resolved against the
 *   hop) checked like the first URL;
 * - one time limit for everything (DNS, connections, redirects, the body);
 * - at most MAX_IMAGE_BYTES read: a larger Content-Length is refused before the body, and the
 *   body is counted while it streams in;
 * - then the bytes are accepted like an upload (imageFromBytes: sniffed, header read); the
 *   server's Content-Type is not trusted.
 *
 * Every failure is an ImageInputError naming the field, so it is a 400 before any charge.
 */
import type { ImageInput } from "./engine";
import { ImageInputError, imageFromBytes } from "./imageInput";
import { MAX_IMAGE_BYTES, MAX_IMAGE_URL_CHARS, MAX_IMAGE_URL_REDIRECTS } from "./limits";
import { describePinRefusal, fetchPinned, pinToCheckedAddress, RESOLVE_TIMEOUT_MS, type PinnedFetcher, type ResolveHost } from "./pinnedFetch";

export const IMAGE_FETCH_USER_AGENT = "Atelier-ImageFetch/1";

export interface ImageFetchPolicy {
  /** The operator's `[fetch] allow_private`: loopback, private, link-local… addresses allowed. */
  allowPrivateAddresses: boolean;
  /** `[fetch] timeout_ms`: the whole fetch, redirects and body included. */
  timeoutMs: number;
  resolve: ResolveHost;
  /** The HTTP client (Bun's fetch; tests script it). */
  fetch?: PinnedFetcher;
}

/** `http://…` or `https://…`: a value that is fetched rather than decoded. */
export function isImageUrl(value: unknown): value is string {
  return typeof value === "string" && /^https?:\/\//i.test(value.slice(0, 8));
}

const refused = (param: string, why: string) => new ImageInputError(`'${param}' cannot be fetched: ${why}`, param, "image_url_refused");
const failed = (param: string, why: string) => new ImageInputError(`'${param}' could not be fetched: ${why}`, param, "image_fetch_failed");
const tooLarge = (param: string, why: string) =>
  new ImageInputError(`'${param}' is larger than 10 MiB (${MAX_IMAGE_BYTES} bytes): ${why}`, param, "image_too_large");

/** The URL rule for one hop; with `base` (a redirect) the Location is resolved against it. */
function checkedUrl(text: string, param: string, base?: URL): URL {
  const what = base ? "it redirects to a URL that" : "the URL";
  if (text.length > MAX_IMAGE_URL_CHARS) throw refused(param, `${what} has more than ${MAX_IMAGE_URL_CHARS} characters.`);
  let url: URL;
  try {
    url = new URL(text, base);
  } catch {
    throw refused(param, `${what} is not a valid absolute http:// or https:// URL.`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw refused(param, `${what} is not http:// or https://.`);
  if (url.hostname === "") throw refused(param, `${what} has no host.`);
  if (url.username !== "" || url.password !== "") throw refused(param, `${what} contains a user name or password.`);
  url.hash = "";
  return url;
}

/** Reads the body, failing as soon as it passes `limit` bytes or `signal` aborts. */
async function readCapped(response: Response, limit: number, param: string, signal: AbortSignal): Promise<Uint8Array> {
  const reader = response.body?.getReader();
  if (!reader) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  // A stalled body must not outlive the time limit: cancelling ends the pending read.
  const onAbort = () => void reader.cancel().catch(() => {});
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (signal.aborted) throw Object.assign(new Error("aborted"), { name: "AbortError" });
      if (done) break;
      size += value.byteLength;
      if (size > limit) throw tooLarge(param, "the body went past the limit while it was read.");
      chunks.push(value);
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => {});
  }
  return Buffer.concat(chunks);
}

function isAbort(e: unknown): boolean {
  const name = (e as Error)?.name;
  return name === "TimeoutError" || name === "AbortError";
}

/** Fetches an image URL under the rules above; `signal` lets the caller give up early. */
export async function fetchImage(text: string, param: string, policy: ImageFetchPolicy, signal?: AbortSignal): Promise<ImageInput> {
  const deadline = AbortSignal.timeout(policy.timeoutMs);
  const abort = signal ? AbortSignal.any([deadline, signal]) : deadline;
  const started = performance.now();
  const timedOut = () => failed(param, `no complete answer within ${policy.timeoutMs} ms.`);
  let url = checkedUrl(text, param);
  for (let redirects = 0; ; redirects++) {
    const left = policy.timeoutMs - (performance.now() - started);
    if (left <= 0 || deadline.aborted) throw timedOut();
    const pinned = await pinToCheckedAddress(url, policy, Math.min(RESOLVE_TIMEOUT_MS, left));
    if (pinned.refused) {
      const sentence = describePinRefusal(url.hostname, pinned.refused, "image URLs may only point to public addresses");
      if (pinned.refused.kind === "not_public") throw refused(param, `${redirects > 0 ? `a redirect goes to ${url.host}; ` : ""}${sentence}`);
      throw failed(param, sentence);
    }
    let response: Response;
    try {
      response = await fetchPinned(pinned.target, { method: "GET", headers: { accept: "image/png, image/jpeg, image/webp", "user-agent": IMAGE_FETCH_USER_AGENT }, signal: abort }, policy.fetch);
    } catch (e) {
      if (deadline.aborted) throw timedOut();
      if (isAbort(e)) throw failed(param, "the request was abandoned.");
      const code = (e as { code?: string }).code;
      throw failed(param, `the connection to ${url.host} failed${code ? ` (${code})` : ""}.`);
    }
    const status = response.status;
    if (status >= 300 && status < 400 && status !== 304) {
      response.body?.cancel().catch(() => {});
      const location = response.headers.get("location");
      if (!location) throw failed(param, `${url.host} answered HTTP ${status} without a Location.`);
      if (redirects >= MAX_IMAGE_URL_REDIRECTS) throw failed(param, `more than ${MAX_IMAGE_URL_REDIRECTS} redirects.`);
      url = checkedUrl(location, param, url);
      continue;
    }
    if (status < 200 || status >= 300) {
      response.body?.cancel().catch(() => {});
      throw failed(param, `${url.host} answered HTTP ${status}.`);
    }
    const declared = response.headers.get("content-length");
    if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > MAX_IMAGE_BYTES) {
      response.body?.cancel().catch(() => {});
      throw tooLarge(param, `${url.host} announced ${declared} bytes.`);
    }
    let bytes: Uint8Array;
    try {
      bytes = await readCapped(response, MAX_IMAGE_BYTES, param, abort);
    } catch (e) {
      if (e instanceof ImageInputError) throw e;
      if (deadline.aborted) throw timedOut();
      if (isAbort(e)) throw failed(param, "the request was abandoned.");
      throw failed(param, `the body from ${url.host} broke off (${(e as Error).message}).`);
    }
    return imageFromBytes(bytes, param);
  }
}
