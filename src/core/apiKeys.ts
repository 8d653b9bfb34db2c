/** API key material: `sk-atl-` + 43 base62 characters (256 bits from the CSPRNG). */
import { sha256Hex } from "./digest";
import { base62OfByte } from "./base62";
export const KEY_PREFIX = "sk-atl-";
const SECRET_CHARS = 43; // 43 * log2(62) ≈ 256 bits
const DISPLAY_CHARS = 8;

export interface NewApiKey {
  /** The full key: shown once, never stored. */
  secret: string;
  /** Short, non-secret handle used in lists and `key revoke`. */
  prefix: string;
  hash: string;
}

/**
 * Uniform base62 (base62OfByte's rejection sampling), from fresh CSPRNG bytes: what secrets
 * (keys, sessions, tokens) are made of. An indexed loop over one buffer (a typed array's
 * iterator costs several times more).
 */
export function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    const bytes = crypto.getRandomValues(new Uint8Array(length * 2));
    for (let i = 0; i < bytes.length && out.length < length; i++) out += base62OfByte(bytes[i]!);
  }
  return out;
}

export function hashApiKey(secret: string): string {
  return sha256Hex(secret);
}

export function generateApiKey(): NewApiKey {
  const body = randomBase62(SECRET_CHARS);
  const secret = KEY_PREFIX + body;
  return { secret, prefix: KEY_PREFIX + body.slice(0, DISPLAY_CHARS), hash: hashApiKey(secret) };
}

export function looksLikeApiKey(value: string): boolean {
  return value.startsWith(KEY_PREFIX) && value.length === KEY_PREFIX.length + SECRET_CHARS;
}
