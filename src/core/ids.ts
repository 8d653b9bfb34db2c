import { randomBase62 } from "./apiKeys";

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Opaque identifiers with a readable kind prefix. */
export function newId(prefix: string, length = 24): string {
  return `${prefix}${randomBase62(length)}`;
}

/**
 * An id that sorts by creation time (8 base62 characters of the millisecond clock, then random
 * ones): rows keyed by it are appended to the end of the primary-key B-tree instead of landing
 * on a random page each, which keeps batched inserts cheap as the table grows. Same length as
 * newId's by default.
 */
export function newTimeOrderedId(prefix: string, length = 24, now = Date.now()): string {
  let time = "";
  for (let t = Math.floor(now), i = 0; i < 8; i++, t = Math.floor(t / 62)) time = BASE62[t % 62] + time;
  return `${prefix}${time}${randomBase62(length - 8)}`;
}
