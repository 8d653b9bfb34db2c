/**
 * The redactor's window index (engines/fragmentIndex.ts) against the plain definition: every
 * position of the text whose next `width` UTF-16 units are one of the windows, none other.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { FragmentIndex } from "../../src/engines/fragmentIndex";

/** The definition: a slice per position, looked up in a set. */
function naiveMatches(text: string, windows: string[], width: number): number[] {
  const set = new Set(windows);
  const out: number[] = [];
  for (let at = 0; at + width <= text.length; at++) if (set.has(text.slice(at, at + width))) out.push(at);
  return out;
}

function matches(index: FragmentIndex, text: string): number[] {
  const out: number[] = [];
  index.forEachMatch(text, (at) => out.push(at));
  return out;
}

describe("FragmentIndex", () => {
  test("finds overlapping and repeated windows, at both edges, and nothing in shorter or empty texts", () => {
    const index = new FragmentIndex(["abcd", "bcde", "zzzz"], 4);
    expect(matches(index, "abcdeXabcd")).toEqual([0, 1, 6]);
    expect(matches(index, "zzzzzz")).toEqual([0, 1, 2]);
    expect(matches(index, "abc")).toEqual([]);
    expect(matches(index, "")).toEqual([]);
    expect(matches(new FragmentIndex([], 4), "abcd")).toEqual([]);
  });

  test("compares UTF-16 units: a window may hold half of a surrogate pair", () => {
    const art = "🎨"; // two units
    const index = new FragmentIndex([`x${art[0]}`, `${art[1]}y`], 2);
    expect(matches(index, `x${art}y`)).toEqual([0, 2]);
  });

  test("many windows (probing in the table) are all found, and their near misses are not", () => {
    const windows = Array.from({ length: 3000 }, (_, i) => `w${String(i).padStart(7, "0")}`);
    const index = new FragmentIndex(windows, 8);
    for (const w of windows.slice(0, 200)) expect(matches(index, `..${w}..`)).toEqual([2]);
    expect(matches(index, "w0003000 w9999999 x0000001")).toEqual([]);
  });

  test("a window of another width is refused", () => {
    expect(() => new FragmentIndex(["abc"], 4)).toThrow();
  });

  test("property: the same positions as the definition", () => {
    const char = fc.constantFrom(..."abAB01-é🎨 ".split(""), "\ud83c", "\udfa8");
    const str = (min: number, max: number) => fc.array(char, { minLength: min, maxLength: max }).map((cs) => cs.join(""));
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 9 }), fc.array(str(0, 12), { maxLength: 6 }), str(0, 60), (width, secrets, noise) => {
        const windows = secrets.flatMap((s) => Array.from({ length: Math.max(0, s.length - width + 1) }, (_, i) => s.slice(i, i + width)));
        const text = noise + secrets.join(noise.slice(0, 3)) + noise;
        expect(matches(new FragmentIndex(windows, width), text)).toEqual(naiveMatches(text, windows, width));
      }),
      { numRuns: 3000 },
    );
  });
});
