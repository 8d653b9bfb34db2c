import { BASE62, base62OfByte } from "./base62";

/**
 * Random bytes for ids, drawn from the CSPRNG a block at a time: one call per 4 KiB instead of
 * one per id (every request makes one). Secrets (API keys, sessions, tokens) do not come from
 * here: they use apiKeys' randomBase62, whose bytes never wait in memory for a later use.
 */
const pool = new Uint8Array(4096);
let poolAt = pool.length;

/** Uniform base62 (base62OfByte's rejection sampling), from the pooled bytes. */
function randomIdChars(length: number): string {
  let out = "";
  while (out.length < length) {
    if (poolAt === pool.length) {
      crypto.getRandomValues(pool);
      poolAt = 0;
    }
    out += base62OfByte(pool[poolAt++]!);
  }
  return out;
}

/** Opaque identifiers with a readable kind prefix. */
export function newId(prefix: string, length = 24): string {
  return `${prefix}${randomIdChars(length)}`;
}

let timeAt = Number.NaN;
let timeChars = "";

/**
 * An id that sorts by creation time (8 base62 characters of the millisecond clock, then random
 * ones): rows keyed by it are appended to the end of the primary-key B-tree instead of landing
 * on a random page each, which keeps batched inserts cheap as the table grows. Same length as
 * newId's by default.
 */
export function newTimeOrderedId(prefix: string, length = 24, now = Date.now()): string {
  const ms = Math.floor(now);
  // The clock's characters are formatted once per millisecond, however many ids share it.
  if (ms !== timeAt) {
    let time = "";
    for (let t = ms, i = 0; i < 8; i++, t = Math.floor(t / 62)) time = BASE62[t % 62] + time;
    timeAt = ms;
    timeChars = time;
  }
  return `${prefix}${timeChars}${randomIdChars(length - 8)}`;
}
