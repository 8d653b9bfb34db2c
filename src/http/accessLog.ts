/**
 * The fields of the access log line, one per request: who (user, key prefix — never the key),
 * what (method, path, status, duration) and, for image and chat requests, the model, the
 * credits charged and refunded so far, and the upstream account that served it, read from the
 * request's own record (store/requests), the one place those facts live. An async or streamed
 * image answer is logged when its answer starts: its charge shows, its outcome is in the history.
 */
import type { Store } from "../store";
import type { RequestMeta } from "./requestMeta";

/** The routes whose requests have a record (POST /v1/images/generations, /edits, /v1/chat/completions). */
const RECORDED = /^\/v1\/(images\/(generations|edits)|chat\/completions)\/?$/;

export interface AccessLogInput {
  meta: RequestMeta;
  method: string;
  path: string | undefined;
  status: number;
  durationMs: number;
}

/** The line's fields; a promise only when they need the request's record (a recorded route, a known user). */
export function accessLogFields(input: AccessLogInput, store: Pick<Store, "requests">): Record<string, unknown> | Promise<Record<string, unknown>> {
  const { meta, method, path } = input;
  const fields: Record<string, unknown> = {
    request_id: meta.id,
    method,
    path: path ?? null,
    status: input.status,
    duration_ms: Math.round(input.durationMs * 10) / 10,
    user_id: meta.userId ?? null,
    key_prefix: meta.principal?.keyPrefix ?? null,
  };
  if (method !== "POST" || path === undefined || meta.userId === undefined || !RECORDED.test(path)) return fields;
  // A chat row waiting for its batch is in memory: the line is complete without a promise.
  const queued = store.requests.queuedRecordOf(meta.id);
  return queued ? withRow(fields, queued) : withRecord(fields, meta.id, store);
}

type Row = NonNullable<Awaited<ReturnType<Store["requests"]["recordOf"]>>>;

/** The stored record's facts added to the line. */
async function withRecord(fields: Record<string, unknown>, id: string, store: Pick<Store, "requests">): Promise<Record<string, unknown>> {
  // A request refused before its record was written (400, 402, 429…) has none: the line says who tried.
  let row: Row | null;
  try {
    row = await store.requests.recordOf(id);
  } catch {
    return fields; // a log line never fails a request
  }
  return row ? withRow(fields, row) : fields;
}

function withRow(fields: Record<string, unknown>, row: Row): Record<string, unknown> {
  fields.model = row.model;
  fields.credits_charged = row.credits_charged;
  fields.credits_refunded = row.credits_refunded;
  fields.upstream = row.upstream_id === null ? null : row.account_id === null ? row.upstream_id : `${row.upstream_id}/${row.account_id}`;
  fields.outcome = row.status;
  return fields;
}
