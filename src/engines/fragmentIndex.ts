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
 * candidate's hash is looked up in an open-addressing table of the windows' hashes, and a hash
 * that is there is checked against the windows themselves. Pairs share table entries (16 bits):
 * a shared entry holds the smallest skip, which only makes the scan look more often.
 *
 * Why no window is skipped: let one end at `e`. While the scan's end is before `e`, either its
 * pair lies inside the window, ending k units before `e`, and the pair's skip is at most k; or
 * the pair starts before the window, so the end is at most e - (width - 1) and a skip of at most
 * width - 1 lands on or before `e`. At `e` the pair is the window's last, whose skip is 0.
 */

/** An odd multiplier (FNV's prime): hashes are polynomials in it, modulo 2^32. */
const BASE = 0x01000193;
/** Fibonacci hashing (2^32 / golden ratio) spreads the polynomial's low bits over the table. */
const FIBONACCI = 0x9e3779b1;
/** Entries of the skip table: two ASCII units map to one entry each. */
const PAIRS = 1 << 16;

function pairOf(first: number, second: number): number {
  return ((first << 7) ^ second) & (PAIRS - 1);
}

export class FragmentIndex {
  readonly width: number;
  /** The windows by hash (almost always one each). */
  private readonly byHash = new Map<number, string[]>();
  /** Open addressing on the hashes: a lookup is a probe or two in typed arrays. */
  private readonly slots: Int32Array;
  private readonly filled: Uint8Array;
  private readonly mask: number;
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
    let size = 16;
    while (size < this.byHash.size * 4) size *= 2;
    this.slots = new Int32Array(size);
    this.filled = new Uint8Array(size);
    this.mask = size - 1;
    for (const h of this.byHash.keys()) {
      let i = this.slotOf(h);
      while (this.filled[i]) i = (i + 1) & this.mask;
      this.slots[i] = h;
      this.filled[i] = 1;
    }
    this.skip = null;
    if (width >= 2) {
      const skip = new Uint8Array(PAIRS).fill(width - 1);
      for (const ws of this.byHash.values()) {
        for (const w of ws) {
          for (let j = 0; j + 1 < width; j++) {
            const pair = pairOf(w.charCodeAt(j), w.charCodeAt(j + 1));
            const left = width - 2 - j;
            if (left < skip[pair]!) skip[pair] = left;
          }
        }
      }
      this.skip = skip;
    }
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

  private slotOf(h: number): number {
    return (Math.imul(h, FIBONACCI) >>> 0) & this.mask;
  }

  private isWindowAt(text: string, at: number): boolean {
    const h = hashAt(text, at, this.width);
    for (let i = this.slotOf(h); this.filled[i]; i = (i + 1) & this.mask) {
      if (this.slots[i] !== h) continue;
      for (const w of this.byHash.get(h)!) if (text.startsWith(w, at)) return true;
      return false;
    }
    return false;
  }
}

function hashAt(s: string, at: number, width: number): number {
  let h = 0;
  for (let k = 0; k < width; k++) h = (Math.imul(h, BASE) + s.charCodeAt(at + k)) | 0;
  return h;
}
