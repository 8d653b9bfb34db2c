/**
 * The depth check that runs before a JSON body is parsed, on bytes (large bodies, uploads) and
 * on text (small bodies read with text()): both must agree with the nesting JSON.parse finds,
 * whatever the strings in between hold (quotes, escaped quotes, brackets, non-ASCII).
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { jsonNestedDeeperThan, jsonTextNestedDeeperThan } from "../../src/http/jsonDepth";

const utf8 = new TextEncoder();

/** The nesting of a parsed value: what the check must measure. */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + children.reduce((max: number, v) => Math.max(max, depthOf(v)), 0);
}

describe("the JSON depth checks", () => {
  test("bytes and text agree with the parsed value's depth, at every limit around it", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 12 }), (value) => {
        const text = JSON.stringify(value);
        const depth = depthOf(JSON.parse(text));
        for (const limit of [Math.max(0, depth - 1), depth, depth + 1]) {
          expect(jsonTextNestedDeeperThan(text, limit)).toBe(depth > limit);
          expect(jsonNestedDeeperThan(utf8.encode(text), limit)).toBe(depth > limit);
        }
      }),
      { numRuns: 400 },
    );
  });

  test("brackets and escaped quotes inside strings do not count", () => {
    const text = JSON.stringify({ a: ['[[[{{{"\\"]]]', "\\", '\\"[[['], b: "}}}]]]" });
    expect(jsonTextNestedDeeperThan(text, 2)).toBe(false);
    expect(jsonTextNestedDeeperThan(text, 1)).toBe(true);
    expect(jsonNestedDeeperThan(utf8.encode(text), 2)).toBe(false);
  });

  test("an unterminated string or unbalanced text is measured as far as it goes", () => {
    expect(jsonTextNestedDeeperThan('[[["abc', 2)).toBe(true);
    expect(jsonTextNestedDeeperThan('["[[[[[[', 1)).toBe(false);
    expect(jsonTextNestedDeeperThan("[".repeat(65), 64)).toBe(true);
    expect(jsonTextNestedDeeperThan("[".repeat(64) + "]".repeat(64), 64)).toBe(false);
  });
});
