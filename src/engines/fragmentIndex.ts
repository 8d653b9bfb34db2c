/**
 * Where in a text any of a fixed set of equal-length strings (the secrets' windows, see
 * redact.ts) occurs, in one pass without allocating: a rolling hash of the last `width` UTF-16
 * units is looked up in an open-addressing table of the windows' hashes, and only a hash that
 * is there is checked against the windows themselves. Looking up a slice of the text per
 * position instead cost 40-65 ns per character (a 4 KB chat answer: about 170 µs, more than
 * the rest of the request; bench/redact.ts).
 */

/** An odd multiplier (FNV's prime): hashes are polynomials in it, modulo 2^32. */
const BASE = 0x01000193;
/** Fibonacci hashing (2^32 / golden ratio) spreads the polynomial's low bits over the table. */
const FIBONACCI = 0x9e3779b1;

export class FragmentIndex {
  readonly width: number;
  /** BASE^(width - 1) modulo 2^32: the weight of the unit leaving the window. */
  private readonly leaving: number;
  /** The windows by hash (almost always one each). */
  private readonly byHash = new Map<number, string[]>();
  /** Open addressing on the hashes: a position's lookup is a probe or two in typed arrays. */
  private readonly slots: Int32Array;
  private readonly filled: Uint8Array;
  private readonly mask: number;

  constructor(windows: Iterable<string>, width: number) {
    this.width = width;
    let leaving = 1;
    for (let i = 1; i < width; i++) leaving = Math.imul(leaving, BASE);
    this.leaving = leaving;
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
  }

  /** Calls `found(at)` for each position where a window starts in `text`, in order. */
  forEachMatch(text: string, found: (at: number) => void): void {
    const { width, leaving, slots, filled, mask } = this;
    if (this.byHash.size === 0 || text.length < width) return;
    const last = text.length - width;
    let h = hashAt(text, 0, width);
    for (let at = 0; ; at++) {
      // The table is at most a quarter full: nearly every position ends at its first empty slot.
      for (let i = (Math.imul(h, FIBONACCI) >>> 0) & mask; filled[i]; i = (i + 1) & mask) {
        if (slots[i] === h) {
          if (this.holdsAt(text, at, h)) found(at);
          break;
        }
      }
      if (at === last) return;
      h = (Math.imul(h - Math.imul(text.charCodeAt(at), leaving), BASE) + text.charCodeAt(at + width)) | 0;
    }
  }

  private slotOf(h: number): number {
    return (Math.imul(h, FIBONACCI) >>> 0) & this.mask;
  }

  private holdsAt(text: string, at: number, h: number): boolean {
    for (const w of this.byHash.get(h)!) if (text.startsWith(w, at)) return true;
    return false;
  }
}

function hashAt(s: string, at: number, width: number): number {
  let h = 0;
  for (let k = 0; k < width; k++) h = (Math.imul(h, BASE) + s.charCodeAt(at + k)) | 0;
  return h;
}
