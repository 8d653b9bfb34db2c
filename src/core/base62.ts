/** Base62 (digits, then upper case, then lower case): the characters of ids, API keys and tokens. */
export const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/**
 * The character a random byte stands for, or "" for one of the eight bytes (>= 248) that would
 * bias the modulo: rejection sampling, so that every character is equally likely.
 */
export function base62OfByte(byte: number): string {
  return byte < 248 ? BASE62[byte % 62]! : "";
}
