/**
 * The depth check that runs before a JSON body is parsed (on its text: read with text() for a
 * small body, decoded by parseJsonBody otherwise): it must agree with the nesting JSON.parse
 * finds, whatever the strings in between hold (quotes, escaped quotes, brackets, non-ASCII).
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parseJsonBody } from "../../src/http/body";
import { jsonNestedDeeperThan } from "../../src/http/jsonDepth";
import { MAX_JSON_DEPTH } from "../../src/core/limits";

const utf8 = new TextEncoder();

/** The nesting of a parsed value: what the check must measure. */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + children.reduce((max: number, v) => Math.max(max, depthOf(v)), 0);
}

describe("the JSON depth checks", () => {
  test("it agrees with the parsed value's depth, at every limit around it", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 12 }), (value) => {
        const text = JSON.stringify(value);
        const depth = depthOf(JSON.parse(text));
        for (const limit of [Math.max(0, depth - 1), depth, depth + 1]) {
          expect(jsonNestedDeeperThan(text, limit)).toBe(depth > limit);
        }
      }),
      { numRuns: 400 },
    );
  });

  test("brackets and escaped quotes inside strings do not count", () => {
    const text = JSON.stringify({ a: ['[[[{{{"\\"]]]', "\\", '\\"[[['], b: "}}}]]]" });
    expect(jsonNestedDeeperThan(text, 2)).toBe(false);
    expect(jsonNestedDeeperThan(text, 1)).toBe(true);
  });

  test("an unterminated string or unbalanced text is measured as far as it goes", () => {
    expect(jsonNestedDeeperThan('[[["abc', 2)).toBe(true);
    expect(jsonNestedDeeperThan('["[[[[[[', 1)).toBe(false);
    expect(jsonNestedDeeperThan("[".repeat(65), 64)).toBe(true);
    expect(jsonNestedDeeperThan("[".repeat(64) + "]".repeat(64), 64)).toBe(false);
  });

  test("a body given as bytes is held to the same limit (parseJsonBody: decoded, then checked)", () => {
    const nested = (depth: number) => utf8.encode("[".repeat(depth) + "]".repeat(depth));
    expect(parseJsonBody(nested(MAX_JSON_DEPTH))).toBeArray();
    expect(() => parseJsonBody(nested(MAX_JSON_DEPTH + 1))).toThrow(/nested more than/);
    expect(() => parseJsonBody(new Uint8Array(0))).toThrow(/empty/);
  });
});
