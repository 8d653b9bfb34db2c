/** Hashing and comparing secrets (API keys, session ids, setup tokens, CSRF tokens), defined once. */

/** SHA-256 as lowercase hex: how a secret is stored (never the secret itself). */
export function sha256Hex(data: string | Uint8Array): string {
  // The one-shot form: no hasher object per call (this runs for every API request's key).
  return Bun.SHA256.hash(data, "hex");
}

/**
 * Equality in time independent of where the strings differ, so a guess cannot be refined by
 * timing; only the length (public for our fixed-length tokens) may end it early.
 */
export function tokensEqual(a: string | null | undefined, b: string): boolean {
  if (typeof a !== "string" || a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}
