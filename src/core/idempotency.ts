/**
 * Idempotency-Key, with Stripe's semantics, scoped to the user: the first request runs; a
 * repeat of the same request (method, path and a canonical hash of the body, files included)
 * within 24 hours gets the first one's answer without a charge; the same key with a different
 * request is refused; a request that failed and was refunded may run again under its key.
 */
import { sha256Hex } from "./digest";
import { DecodedDataUrl } from "./imageInput";
import type { TaskRow, TaskStore } from "./store";
import { isPlainObject } from "./values";

/** How long an Idempotency-Key is remembered (Stripe's 24 hours). */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

/** 1 to 255 printable ASCII characters (Stripe's rule). */
const KEY = /^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$/;

export class InvalidIdempotencyKey extends Error {
  override name = "InvalidIdempotencyKey";
}

/** The key was used with a different request. */
export class IdempotencyKeyReused extends Error {
  override name = "IdempotencyKeyReused";
  constructor(readonly key: string) {
    super(`the Idempotency-Key was used with a different request`);
  }
}

/** The request holding the key is still running and did not finish within the wait. */
export class IdempotencyInProgress extends Error {
  override name = "IdempotencyInProgress";
  constructor(readonly key: string) {
    super(`the request with this Idempotency-Key is still running`);
  }
}

export function checkIdempotencyKey(value: string): string {
  if (!KEY.test(value)) throw new InvalidIdempotencyKey("The Idempotency-Key header must be 1 to 255 printable ASCII characters.");
  return value;
}

/**
 * The request's fingerprint: method, path and the body in a canonical form (object keys sorted,
 * uploaded files by the SHA-256 of their bytes), so the same request hashes the same however its
 * JSON was spaced or its multipart parts were ordered.
 */
export async function requestFingerprint(method: string, path: string, body: unknown): Promise<string> {
  return sha256Hex(`${method.toUpperCase()} ${path}\n${JSON.stringify(await canonical(body))}`);
}

async function canonical(value: unknown): Promise<unknown> {
  if (value instanceof Blob) return { $file: sha256Hex(new Uint8Array(await value.arrayBuffer())), size: value.size };
  if (value instanceof DecodedDataUrl) return { $data_url: sha256Hex(value.bytes), type: value.subtype.toLowerCase() };
  if (Array.isArray(value)) return Promise.all(value.map(canonical));
  if (isPlainObject(value)) {
    const out: [string, unknown][] = [];
    for (const k of Object.keys(value).sort()) out.push([k, await canonical(value[k])]);
    return out;
  }
  return value;
}

export type KeyDecision =
  /** Nobody holds the key (or its request failed and was refunded): run, claiming it. */
  | { kind: "run" }
  /** The key answers for this task: replay it (wait first if it is still running). */
  | { kind: "replay"; task: TaskRow };

/** What to do with a request that carries this key and fingerprint. */
export async function decideIdempotency(tasks: TaskStore, userId: number, key: string, fingerprint: string, now: number): Promise<KeyDecision> {
  const record = await tasks.idempotency(userId, key, now);
  if (!record) return { kind: "run" };
  if (record.fingerprint !== fingerprint) throw new IdempotencyKeyReused(key);
  const task = await tasks.get(record.request_id);
  if (!task || task.status === "failed" || task.status === "canceled") return { kind: "run" };
  return { kind: "replay", task };
}
