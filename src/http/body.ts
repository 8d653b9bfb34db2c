/**
 * Request bodies: read with a per-request size limit and a global in-flight byte budget, so
 * many large uploads at once cannot exhaust memory (413 for one oversized body, 429 when the
 * budget is spent), then parsed by content type (malformed JSON → 400, anything else → 415).
 */
import { authenticateApiRequest, type ApiAuthDeps } from "./auth";
import { ApiError, badRequest, payloadTooLarge, tooManyRequests, unsupportedMediaType } from "./errors";
import { metaOf } from "./requestMeta";
import { concatChunks } from "../core/bytes";

export class BodyBudget {
  private inflight = 0;
  constructor(
    readonly maxBodyBytes: number,
    readonly maxInflightBytes: number,
  ) {}

  get inflightBytes(): number {
    return this.inflight;
  }

  /** Reserves n more bytes for a request or throws the answer to send. */
  reserve(request: Request, n: number): void {
    const meta = metaOf(request);
    if (meta.reservedBodyBytes + n > this.maxBodyBytes) throw payloadTooLarge(this.maxBodyBytes);
    if (this.inflight + n > this.maxInflightBytes) {
      throw tooManyRequests(
        "The server is receiving too many large request bodies at once; retry shortly.",
        "server_busy",
        1000,
      );
    }
    this.inflight += n;
    meta.reservedBodyBytes += n;
  }

  release(request: Request): void {
    const meta = metaOf(request);
    this.inflight -= meta.reservedBodyBytes;
    meta.reservedBodyBytes = 0;
  }
}

/**
 * Checked before the body is read: a declared Content-Length over the limit is refused at once
 * (and reserved whole otherwise), so Bun never has to answer with its own empty 413.
 */
export function admitDeclaredBody(request: Request, budget: BodyBudget): void {
  const declared = request.headers.get("content-length");
  if (declared === null) return;
  const n = Number(declared);
  if (!Number.isFinite(n) || n < 0) throw badRequest("Invalid Content-Length header.", null, "invalid_content_length");
  if (n > budget.maxBodyBytes) throw payloadTooLarge(budget.maxBodyBytes);
  if (n > 0) budget.reserve(request, n);
}

/**
 * A body without Content-Length (chunked) can be any size, and routes that do not read through
 * acceptBody would buffer all of it: this returns the same request with a body stream that fails
 * with our 413 once it passes the limit. Requests with a declared length come back unchanged.
 */
export function capChunkedBody(request: Request, maxBytes: number): Request {
  if (request.body === null || request.headers.has("content-length")) return request;
  let seen = 0;
  const capped = request.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        seen += chunk.byteLength;
        if (seen > maxBytes) controller.error(payloadTooLarge(maxBytes));
        else controller.enqueue(chunk);
      },
    }),
  );
  return new Request(request, { body: capped, duplex: "half" } as RequestInit);
}

async function readLimited(request: Request, budget: BodyBudget): Promise<Uint8Array<ArrayBuffer>> {
  const declared = request.headers.get("content-length");
  if (declared !== null) {
    // Reserved in admitDeclaredBody; Bun enforces that the body matches the declared length.
    return new Uint8Array(await request.arrayBuffer());
  }
  // Chunked upload: count as we go.
  const reader = request.body?.getReader();
  if (!reader) return new Uint8Array(new ArrayBuffer(0));
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      budget.reserve(request, value.byteLength);
      total += value.byteLength;
      chunks.push(value);
    }
  } catch (e) {
    await reader.cancel().catch(() => {});
    throw e;
  }
  return concatChunks(chunks, total);
}

export type BodyKind = "json" | "multipart";

const CONTENT_TYPES: Record<BodyKind, string> = { json: "application/json", multipart: "multipart/form-data" };

function kindOf(contentType: string | null): BodyKind | null {
  const base = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  if (base === "application/json" || base.endsWith("+json")) return "json";
  if (base === "multipart/form-data") return "multipart";
  return null;
}

/** Multipart fields as an object; a repeated field becomes an array (so `image[]` ×3 is a list). */
function formToObject(form: FormData): Record<string, FormDataEntryValue | FormDataEntryValue[]> {
  const out: Record<string, FormDataEntryValue | FormDataEntryValue[]> = {};
  for (const key of new Set(form.keys())) {
    const all = form.getAll(key);
    out[key] = all.length === 1 ? all[0]! : all;
  }
  return out;
}

/**
 * A route-level Elysia `parse` hook accepting the given body kinds. Returning a value makes it
 * the body; throwing an ApiError answers with it.
 */
export function acceptBody(budget: BodyBudget, ...accepted: BodyKind[]) {
  return async function parseBody({ request }: { request: Request }): Promise<unknown> {
    const contentType = request.headers.get("content-type");
    const kind = kindOf(contentType);
    if (!kind || !accepted.includes(kind)) throw unsupportedMediaType(contentType, accepted.map((k) => CONTENT_TYPES[k]));
    const bytes = await readLimited(request, budget);
    if (kind === "json") {
      if (bytes.byteLength === 0) throw badRequest("The request body is empty; send a JSON object.", null, "invalid_json");
      try {
        return JSON.parse(new TextDecoder().decode(bytes));
      } catch (e) {
        throw badRequest(
          `We could not parse the JSON body of your request (${(e as Error).message}). Send valid JSON with Content-Type: application/json.`,
          null,
          "invalid_json",
        );
      }
    }
    try {
      const form = await new Response(bytes, { headers: { "content-type": contentType! } }).formData();
      return formToObject(form);
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw badRequest(`We could not parse the multipart/form-data body: ${(e as Error).message}`, null, "invalid_multipart");
    }
  };
}

/**
 * acceptBody for /v1 routes: the caller is authenticated first. Elysia parses before it runs
 * the route's auth step, and the server authenticates early only requests that carry a body,
 * so a keyless POST with no body (or an empty one) was answered 400/415 instead of 401.
 */
export function acceptApiBody(auth: ApiAuthDeps, budget: BodyBudget, ...accepted: BodyKind[]) {
  const parse = acceptBody(budget, ...accepted);
  return function parseApiBody(ctx: { request: Request }): Promise<unknown> {
    authenticateApiRequest(ctx.request, auth);
    return parse(ctx);
  };
}
