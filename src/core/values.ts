/** Checks on values of unknown shape (parsed JSON, upstream answers), defined once. */

/** A JSON object: not null, not an array. */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * OpenAI's clients send null for "not set" (the openai types allow null for most optional
 * fields): a top-level null counts as an absent field. Anything but an object is returned as is.
 */
export function withoutNullFields(body: unknown): unknown {
  if (!isPlainObject(body)) return body;
  // Usually there is none: the body itself, without building a copy (or a list of its values) on every request.
  if (!hasNullField(body)) return body;
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null));
}

function hasNullField(body: Record<string, unknown>): boolean {
  for (const key in body) if (body[key] === null) return true;
  return false;
}
