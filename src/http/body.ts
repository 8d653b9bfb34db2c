/**
 * Request bodies: read with a per-request size limit and a global in-flight byte budget, so
 * many large uploads at once cannot exhaust memory (413 for one oversized body; a body that
 * does not fit waits its turn, 429 after the queue timeout), then parsed by content type
 * (malformed JSON → 400, anything else → 415).
 */
import { authenticateApiRequest, type ApiAuthDeps, type Principal } from "./auth";
import { ApiError, badRequest, bodyTooSlow, payloadTooLarge, tooManyRequests, unsupportedMediaType } from "./errors";
import { metaOf, shareMeta } from "./requestMeta";
import { jsonNestedDeeperThan } from "./jsonDepth";
import { MAX_JSON_DEPTH } from "../core/limits";
import { scanJsonBody, scanJsonBytes, type UploadParam } from "./jsonUploads";
import { byDeadline } from "./slowBodyWatch";
import { releaseBytes } from "../core/image/release";
import { signalOf, type ClientSignal } from "../core/clientSignal";
import { timerDelay } from "../core/timerDelay";

const serverBusy = () => tooManyRequests("The server is receiving too many large request bodies at once; retry shortly.", "server_busy", 1000);

interface BudgetWaiter {
  request: Request;
  n: number;
  admitted(): void;
}

/**
 * The request-body bytes in memory at once, across all requests. A declared body waits for its
 * reservation in one FIFO queue (admit: nothing overtakes a big body, and it waits at most the
 * queue timeout, then 429) while Bun holds its unread bytes back on the socket, which costs
 * almost nothing; a chunked body reserves as it arrives and is refused at once when it does not fit.
 */
export class BodyBudget {
  private inflight = 0;
  private readonly waiting: BudgetWaiter[] = [];
  constructor(
    readonly maxBodyBytes: number,
    readonly maxInflightBytes: number,
    /** How long a declared body may wait for its reservation (limits.queue_timeout_ms); 0: refused at once. */
    readonly queueTimeoutMs = 0,
  ) {}

  get inflightBytes(): number {
    return this.inflight;
  }

  /** Declared bodies waiting for their reservation. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Reserves n more bytes for a request whose body may be at most maxBytes, or throws the answer to send. */
  reserve(request: Request, n: number, maxBytes = this.maxBodyBytes): void {
    const meta = metaOf(request);
    if (meta.reservedBodyBytes + n > maxBytes) throw payloadTooLarge(maxBytes);
    if (this.inflight + n > this.maxInflightBytes) throw serverBusy();
    this.take(request, n);
  }

  /**
   * Reserves n bytes for a declared body, waiting in order behind the bodies already waiting
   * until they fit, at most queueTimeoutMs (then 429 server_busy; at once for a body larger than
   * the whole budget). A client that goes away while waiting leaves the queue. `client` may be a
   * getter (core/clientSignal): it is read only when the body has to wait, not on every request.
   */
  async admit(request: Request, n: number, maxBytes = this.maxBodyBytes, client?: ClientSignal): Promise<void> {
    if (this.reserveAtOnce(request, n, maxBytes)) return;
    if (n > this.maxInflightBytes || this.queueTimeoutMs === 0) throw serverBusy();
    const signal = signalOf(client);
    await new Promise<void>((resolve, reject) => {
      const leave = (error: Error) => {
        const at = this.waiting.indexOf(waiter);
        if (at >= 0) this.waiting.splice(at, 1);
        clearTimeout(timer);
        signal?.removeEventListener("abort", aborted);
        reject(error);
        // The head leaving may let the next one in.
        this.dispatch();
      };
      const aborted = () => leave(serverBusy());
      const timer = setTimeout(() => leave(serverBusy()), this.queueTimeoutMs);
      const waiter: BudgetWaiter = {
        request,
        n,
        admitted: () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", aborted);
          resolve();
        },
      };
      this.waiting.push(waiter);
      signal?.addEventListener("abort", aborted, { once: true });
    });
  }

  /**
   * Reserves n bytes now if they fit and no body is waiting (true); false when admit() would
   * have to queue. A body over maxBytes is a 413 either way.
   */
  reserveAtOnce(request: Request, n: number, maxBytes = this.maxBodyBytes): boolean {
    if (metaOf(request).reservedBodyBytes + n > maxBytes) throw payloadTooLarge(maxBytes);
    if (this.waiting.length > 0 || this.inflight + n > this.maxInflightBytes) return false;
    this.take(request, n);
    return true;
  }

  release(request: Request): void {
    const meta = metaOf(request);
    this.inflight -= meta.reservedBodyBytes;
    meta.reservedBodyBytes = 0;
    this.dispatch();
  }

  private take(request: Request, n: number): void {
    this.inflight += n;
    metaOf(request).reservedBodyBytes += n;
  }

  /** Admits waiting bodies from the head while they fit. */
  private dispatch(): void {
    for (;;) {
      const head = this.waiting[0];
      if (!head || this.inflight + head.n > this.maxInflightBytes) return;
      this.waiting.shift();
      this.take(head.request, head.n);
      head.admitted();
    }
  }
}

/** How much of a body a route may receive, and how fast it must arrive. */
export interface BodyRules {
  maxBytes: number;
  /** Time the body may take before the minimum rate applies. */
  graceMs: number;
  /** From then on, the bytes received so far must keep up with this average rate. */
  minBytesPerSecond: number;
  /**
   * A declared body up to this size is left as the socket gave it (no counting stream, no new
   * Request): our parsers (acceptBody) read it whole under one deadline (readSmallBody). Only
   * for routes whose bodies are read by those parsers; 0 or absent: every body is wrapped.
   */
  smallBodyBytes?: number;
}

/**
 * Checked before the body is read: a declared Content-Length over the limit is refused at once
 * (and reserved whole otherwise, waiting for room in the budget), so Bun never has to answer
 * with its own empty 413. Throws rather than rejects when it refuses at once.
 */
export function admitDeclaredBody(request: Request, budget: BodyBudget, maxBytes: number, signal?: ClientSignal): void | Promise<void> {
  const declared = request.headers.get("content-length");
  if (declared === null) return;
  const n = Number(declared);
  if (!/^\d+$/.test(declared) || !Number.isSafeInteger(n)) throw badRequest("Invalid Content-Length header.", null, "invalid_content_length");
  if (n > maxBytes) throw payloadTooLarge(maxBytes);
  // A promise only when the body has to wait for room (nothing to settle for nearly every request).
  if (n > 0 && !budget.reserveAtOnce(request, n, maxBytes)) return budget.admit(request, n, maxBytes, signal);
}

/**
 * Wraps a request's body so that whoever reads it (our parsers or Elysia's) gets an error
 * instead of waiting or buffering without bound:
 * - a body without Content-Length (chunked) is counted against `maxBytes` (413) and reserved in
 *   the budget chunk by chunk (429 when spent); a declared one was reserved by admitDeclaredBody;
 * - after `graceMs`, the bytes received must keep up with `minBytesPerSecond` on average, or the
 *   read fails with 408 (a slow-loris client would otherwise hold its reservation and, on the
 *   long-running routes that have no idle timeout, its socket for ever).
 * The request's meta records whether the body was read to the end: if not, the answer closes
 * the connection, since the unread rest would otherwise be parsed as the next request.
 */
export function guardBody(request: Request, rules: BodyRules, budget: BodyBudget): Request {
  const length = request.headers.get("content-length");
  if (length === "0") return request;
  // Bun frames a declared body by its Content-Length (what follows is the next request), so the
  // length bounds it; admitDeclaredBody checks it against maxBytes. Reading request.body would
  // already build a stream: a small declared body is recognised from the header alone.
  const small = rules.smallBodyBytes ?? 0;
  if (length !== null && small > 0 && /^\d{1,9}$/.test(length) && Number(length) <= Math.min(small, rules.maxBytes)) {
    const meta = metaOf(request);
    meta.bodyUnread = true;
    meta.smallBody = rules;
    return request;
  }
  if (request.body === null) return request;
  const meta = metaOf(request);
  meta.bodyUnread = true;
  const declared = length !== null;
  const source = request.body.getReader();
  // From the first read, not from arrival: a body may wait for the budget first (admitDeclaredBody).
  let startedAt: number | undefined;
  let received = 0;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      startedAt ??= performance.now();
      const deadline = startedAt + rules.graceMs + ((received + 1) / rules.minBytesPerSecond) * 1000;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const tooSlow = new Promise<"too slow">((resolve) => {
        // Capped (core/timerDelay): at a low minimum rate a large body's deadline is weeks off,
        // past what a timer holds, and uncapped the timer would fire at once (408 mid-upload).
        timer = setTimeout(() => resolve("too slow"), timerDelay(deadline - performance.now()));
      });
      try {
        const result = await Promise.race([source.read(), tooSlow]);
        if (result === "too slow") throw bodyTooSlow(rules);
        if (result.done) {
          meta.bodyUnread = false;
          controller.close();
          return;
        }
        received += result.value.byteLength;
        if (!declared) budget.reserve(guarded, result.value.byteLength, rules.maxBytes);
        controller.enqueue(result.value);
      } catch (e) {
        source.cancel().catch(() => {});
        controller.error(e);
      } finally {
        clearTimeout(timer);
      }
    },
    cancel(reason) {
      return source.cancel(reason);
    },
  });
  const guarded = new Request(request, { body: stream, duplex: "half" } as RequestInit);
  shareMeta(request, guarded);
  return guarded;
}

/**
 * A small declared body that guardBody left unwrapped, read whole: it must be complete by
 * the time a body sent at the minimum rate after the grace period would be (never earlier than
 * the wrapped path's rule would fail it), checked by one shared ticker (slowBodyWatch).
 */
async function readSmallBody(request: Request, rules: BodyRules): Promise<Uint8Array<ArrayBuffer>> {
  const bytes = await readSmallBytes(request, rules);
  metaOf(request).bodyUnread = false;
  return new Uint8Array(bytes);
}

/** readSmallBody's read itself (not async: the caller's frame is the one that waits for it). */
function readSmallBytes(request: Request, rules: BodyRules): Promise<ArrayBuffer> {
  return bySmallBodyDeadline(request, rules, request.arrayBuffer());
}

/** A small body's read, failed with 408 unless it completes by the time a body of its declared length sent at the minimum rate after the grace period would. */
function bySmallBodyDeadline<T>(request: Request, rules: BodyRules, read: Promise<T>): Promise<T> {
  const declared = Number(request.headers.get("content-length"));
  const deadline = performance.now() + rules.graceMs + (declared / rules.minBytesPerSecond) * 1000;
  return byDeadline(read, deadline, () => bodyTooSlow(rules));
}

/** Not async itself: one promise less on every body read. */
function readLimited(request: Request): Promise<Uint8Array<ArrayBuffer>> {
  const small = metaOf(request).smallBody;
  if (small) return readSmallBody(request, small);
  // guardBody (on the server's socket) bounds the size, the budget and the rate of this stream.
  return request.arrayBuffer().then((bytes) => new Uint8Array(bytes));
}

/**
 * A body of declared length read into one buffer of that size as it arrives (the default read
 * holds every chunk until it joins them: twice the body at the peak). A body without a length
 * is read the default way.
 */
async function readDeclared(request: Request): Promise<Uint8Array<ArrayBuffer>> {
  if (metaOf(request).smallBody) return readLimited(request);
  const declared = Number(request.headers.get("content-length"));
  if (!request.body || !Number.isSafeInteger(declared) || declared <= 0) return readLimited(request);
  const out = new Uint8Array(declared);
  let at = 0;
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    // Bun frames the body by its Content-Length; a longer one cannot arrive.
    if (at + value.length > declared) throw badRequest("The body is longer than its Content-Length.", null, "invalid_content_length");
    out.set(value, at);
    at += value.length;
    // Copied: a request body's every read is a buffer of its own, given back now (see scanJsonBody).
    releaseBytes(value);
  }
  return at === declared ? out : out.slice(0, at);
}

export type BodyKind = "json" | "multipart";

/** Stateless between calls (no stream option), so one decoder serves every body. */
const utf8 = new TextDecoder();

const CONTENT_TYPES: Record<BodyKind, string> = { json: "application/json", multipart: "multipart/form-data" };

function kindOf(contentType: string | null): BodyKind | null {
  // What the openai clients send, recognised without splitting and lower-casing a copy (a
  // measurable share of a chat request's own work through a socket).
  if (contentType === "application/json") return "json";
  const base = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  if (base === "application/json" || base.endsWith("+json")) return "json";
  if (base === "multipart/form-data") return "multipart";
  return null;
}

/**
 * A JSON body as a value: empty, too deeply nested (checked before parsing, see jsonDepth) and
 * malformed bodies are 400 invalid_json.
 */
export function parseJsonBody(bytes: Uint8Array, reviver?: (key: string, value: unknown) => unknown): unknown {
  return parseJsonText(utf8.decode(bytes), reviver);
}

/** parseJsonBody for a body already read as text (a small JSON body: Bun decoded it, no copy of our own). */
function parseJsonText(text: string, reviver?: (key: string, value: unknown) => unknown): unknown {
  if (text.length === 0) throw badRequest("The request body is empty; send a JSON object.", null, "invalid_json");
  if (jsonNestedDeeperThan(text, MAX_JSON_DEPTH)) {
    throw badRequest(`The JSON body is nested more than ${MAX_JSON_DEPTH} levels deep; this API's requests need far fewer.`, null, "invalid_json");
  }
  try {
    return JSON.parse(text, reviver);
  } catch (e) {
    throw badRequest(
      `We could not parse the JSON body of your request (${(e as Error).message}). Send valid JSON with Content-Type: application/json.`,
      null,
      "invalid_json",
    );
  }
}

/** Elysia parse hook for routes that otherwise use Elysia's own parsers: JSON goes through parseJsonBody. */
export async function parseJsonWithLimits({ request, contentType }: { request: Request; contentType: string }): Promise<unknown> {
  if (kindOf(contentType) === "json") return parseJsonBody(new Uint8Array(await request.arrayBuffer()));
}

/** Parts of a multipart body at most: an edit is a prompt, a few options and up to 16 images. */
export const MAX_FORM_PARTS = 256;

/**
 * Multipart fields as an object; a repeated field becomes an array (so `image[]` ×3 is a list).
 * One pass over the parts: `getAll` per name scans every part, so a body of many small parts
 * with distinct names (40 000 in 2 MB) held the thread for seconds. Object.fromEntries defines
 * each name as an own property, `__proto__` included (an assignment would set the prototype).
 */
function formToObject(form: FormData): Record<string, FormDataEntryValue | FormDataEntryValue[]> {
  const fields = new Map<string, FormDataEntryValue[]>();
  let parts = 0;
  for (const [name, value] of form) {
    if (++parts > MAX_FORM_PARTS) throw badRequest(`The multipart/form-data body has more than ${MAX_FORM_PARTS} parts; this API's requests need far fewer.`, null, "invalid_multipart");
    const values = fields.get(name);
    if (values) values.push(value);
    else fields.set(name, [value]);
  }
  return Object.fromEntries(Array.from(fields, ([name, values]) => [name, values.length === 1 ? values[0]! : values]));
}

/**
 * A route-level Elysia `parse` hook accepting the given body kinds. Returning a value makes it
 * the body; throwing an ApiError answers with it.
 */
export function acceptBody(...accepted: BodyKind[]) {
  return acceptBodyWithUploads(null, accepted);
}

/**
 * acceptBody whose JSON bodies are read as they stream in, the image data URLs at the paths
 * `uploads` names decoded on the way (http/jsonUploads): they arrive in the body as
 * DecodedDataUrl values instead of strings.
 */
function acceptBodyWithUploads(uploads: UploadParam | null, accepted: BodyKind[]) {
  // Not async: a small JSON body is read and parsed by one async frame (readSmallJson), the one
  // Elysia waits for. Every frame between the body's arrival and the route is resumed in turn.
  return function parseBody({ request }: { request: Request }): Promise<unknown> {
    const contentType = request.headers.get("content-type");
    const kind = kindOf(contentType);
    if (!kind || !accepted.includes(kind)) return Promise.reject(unsupportedMediaType(contentType, accepted.map((k) => CONTENT_TYPES[k])));
    const small = metaOf(request).smallBody;
    if (kind === "json" && small && !uploads) return readSmallJson(request, small);
    return parseOtherBody(request, kind, contentType!, small, uploads);
  };
}

/**
 * A small unwrapped JSON body, read whole under its deadline and parsed. Read as text: Bun
 * decodes it natively, where bytes would be copied into a view and decoded again by us.
 */
async function readSmallJson(request: Request, rules: BodyRules): Promise<unknown> {
  const text = await bySmallBodyDeadline(request, rules, request.text());
  metaOf(request).bodyUnread = false;
  return parseJsonText(text);
}

async function parseOtherBody(request: Request, kind: BodyKind, contentType: string, small: BodyRules | undefined, uploads: UploadParam | null): Promise<unknown> {
  if (kind === "json" && uploads && (small || request.body)) {
    // A small unwrapped body is read whole under its deadline first, then scanned.
    const scanned = small ? scanJsonBytes(await readSmallBody(request, small), uploads) : await scanJsonBody(request.body!, uploads);
    return parseJsonBody(scanned.text, scanned.revive);
  }
  if (kind === "json") return parseJsonBody(await readLimited(request));
  const bytes = await readDeclared(request);
  try {
    const form = await new Response(bytes, { headers: { "content-type": contentType } }).formData();
    return formToObject(form);
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw badRequest(`We could not parse the multipart/form-data body: ${(e as Error).message}`, null, "invalid_multipart");
  } finally {
    // The parts hold their own bytes: the body (up to max_body_bytes) goes back now (core/image/release).
    releaseBytes(bytes);
  }
}

/**
 * acceptBody for /v1 routes: the caller is authenticated first. Elysia parses before it runs
 * the route's auth step, and the server authenticates early only requests that carry a body,
 * so a keyless POST with no body (or an empty one) was answered 400/415 instead of 401.
 */
export function acceptApiBody(auth: ApiAuthDeps, ...accepted: BodyKind[]) {
  return acceptApiUploads(auth, null, ...accepted);
}

/** acceptApiBody with the image data URLs of JSON bodies decoded as they stream in (see acceptBodyWithUploads). */
export function acceptApiUploads(auth: ApiAuthDeps, uploads: UploadParam | null, ...accepted: BodyKind[]) {
  const parse = acceptBodyWithUploads(uploads, accepted);
  // Destructured, never passed on whole: Elysia infers from the hook's source what the context
  // needs, and a context handed to another function makes every route parse cookies, query and headers.
  return function parseApiBody({ request }: { request: Request }): Promise<unknown> {
    // On the server the caller was usually authenticated before the body (then no wait here).
    let known: Principal | Promise<Principal>;
    try {
      known = authenticateApiRequest(request, auth);
    } catch (e) {
      return Promise.reject(e);
    }
    return known instanceof Promise ? known.then(() => parse({ request })) : parse({ request });
  };
}
