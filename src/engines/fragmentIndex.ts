/**
 * Where in a text any of a fixed set of equal-length strings (the secrets' windows, see
 * redact.ts) occurs, in one pass without allocating. Looking up a slice of the text per
 * position instead cost 40-65 ns per character (a 4 KB chat answer: about 180 µs, more than
 * the rest of the request; bench/redact.ts).
 *
 * The scan moves the end of a candidate window along the text by the skip table of its last two
 * units (Wu and Manber's multi-pattern search): a pair of units that ends no window lets it
 * move as far as the pair's last place in any window allows (width - 1 for a pair found in none,
 * as most pairs of ordinary text are, a space never being in a key). Where the table says 0, the
 * candidate's hash is looked up among the windows' hashes, and a hash that is there is checked
 * against the windows themselves. Pairs share table entries (16 bits):
 * a shared entry holds the smallest skip, which only makes the scan look more often.
 *
 * Why no window is skipped: let one end at `e`. While the scan's end is before `e`, either its
 * pair lies inside the window, ending k units before `e`, and the pair's skip is at most k; or
 * the pair starts before the window, so the end is at most e - (width - 1) and a skip of at most
 * width - 1 lands on or before `e`. At `e` the pair is the window's last, whose skip is 0.
 */

/** An odd multiplier (FNV's prime): hashes are polynomials in it, modulo 2^32. */
const BASE = 0x01000193;
/** Entries of the skip table: two ASCII units map to one entry each. */
const PAIRS = 1 << 16;

function pairOf(first: number, second: number): number {
  return ((first << 7) ^ second) & (PAIRS - 1);
}

export class FragmentIndex {
  readonly width: number;
  /** The windows by hash (almost always one each). */
  private readonly byHash = new Map<number, string[]>();
  /** How far a candidate's end may move, by its last two units (width ≥ 2 only). */
  private readonly skip: Uint8Array | null;

  constructor(windows: Iterable<string>, width: number) {
    if (!Number.isSafeInteger(width) || width < 1 || width > 255) throw new Error(`an index of width ${width}: 1 to 255 units`);
    this.width = width;
    for (const w of windows) {
      if (w.length !== width) throw new Error(`a window of ${w.length} units in an index of width ${width}`);
      const h = hashAt(w, 0, width);
      const same = this.byHash.get(h);
      if (!same) this.byHash.set(h, [w]);
      else if (!same.includes(w)) same.push(w);
    }
    this.skip = width >= 2 ? skipTable(this.byHash.values(), width) : null;
  }

  /** Calls `found(at)` for each position where a window starts in `text`, in order. */
  forEachMatch(text: string, found: (at: number) => void): void {
    const { width, skip } = this;
    if (this.byHash.size === 0 || text.length < width) return;
    if (!skip) {
      for (let at = 0; at < text.length; at++) if (this.isWindowAt(text, at)) found(at);
      return;
    }
    for (let end = width - 1; end < text.length; ) {
      const move = skip[pairOf(text.charCodeAt(end - 1), text.charCodeAt(end))]!;
      if (move !== 0) {
        end += move;
        continue;
      }
      const at = end - width + 1;
      if (this.isWindowAt(text, at)) found(at);
      end++;
    }
  }

  private isWindowAt(text: string, at: number): boolean {
    const same = this.byHash.get(hashAt(text, at, this.width));
    return same !== undefined && same.some((w) => text.startsWith(w, at));
  }
}

/** For each pair of units, how many units may follow it to the end of a window (the fewest over all windows). */
function skipTable(windowsByHash: Iterable<string[]>, width: number): Uint8Array {
  const skip = new Uint8Array(PAIRS).fill(width - 1);
  for (const ws of windowsByHash) {
    for (const w of ws) {
      for (let j = 0; j + 1 < width; j++) {
        const pair = pairOf(w.charCodeAt(j), w.charCodeAt(j + 1));
        const left = width - 2 - j;
        if (left < skip[pair]!) skip[pair] = left;
      }
    }
  }
  return skip;
}

function hashAt(s: string, at: number, width: number): number {
  let h = 0;
  for (let k = 0; k < width; k++) h = (Math.imul(h, BASE) + s.charCodeAt(at + k)) | 0;
  return h;
}
