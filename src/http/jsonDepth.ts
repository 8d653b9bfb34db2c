/**
 * The nesting depth of a JSON text, measured before it is parsed: JSON.parse and the schema
 * checks after it recurse per level, so a 40 KB body of 20 000 nested arrays costs seconds and
 * gigabytes (or overflows the stack) unless it is refused first. Linear in the input; string
 * contents are skipped with the native indexOf, so a 140 MB body of base64 images costs little.
 */
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;

/** True when some array or object in `text` is nested more than `limit` levels deep. */
export function jsonNestedDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = endOfString(text, i + 1);
      continue;
    }
    if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > limit) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    }
    i++;
  }
  return false;
}

/** The index just past the closing quote of a string starting at `from` (or the end). */
function endOfString(text: string, from: number): number {
  let at = from;
  for (;;) {
    const quote = text.indexOf('"', at);
    if (quote === -1) return text.length;
    let backslashes = 0;
    while (quote - 1 - backslashes >= from && text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    at = quote + 1;
  }
}
