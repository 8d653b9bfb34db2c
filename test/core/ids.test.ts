import { describe, expect, test } from "bun:test";
import { newId, newTimeOrderedId } from "../../src/core/ids";

describe("ids", () => {
  test("newId: the prefix, then the asked number of base62 characters, never the same twice", () => {
    const ids = Array.from({ length: 5000 }, () => newId("img_"));
    for (const id of ids) expect(id).toMatch(/^img_[0-9A-Za-z]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
    expect(newId("t_", 40)).toMatch(/^t_[0-9A-Za-z]{40}$/);
  });

  test("the random characters cover the whole alphabet (the pooled bytes are used once each, across refills)", () => {
    // 5000 ids × 24 characters draw from several 4 KiB blocks of random bytes.
    const seen = new Set(Array.from({ length: 5000 }, () => newId("", 24)).join(""));
    expect(seen.size).toBe(62);
  });

  test("newTimeOrderedId sorts by its millisecond, whatever the random part, and keeps newId's length", () => {
    const a = newTimeOrderedId("req_", 24, 1_700_000_000_000);
    const b = newTimeOrderedId("req_", 24, 1_700_000_000_001);
    const c = newTimeOrderedId("req_", 24, 1_700_000_062_000);
    expect(a).toMatch(/^req_[0-9A-Za-z]{24}$/);
    expect(a < b && b < c).toBe(true);
    // The same millisecond: the same 8 clock characters (formatted once), a different random tail.
    const again = newTimeOrderedId("req_", 24, 1_700_000_000_000);
    expect(again.slice(0, 12)).toBe(a.slice(0, 12));
    expect(again).not.toBe(a);
    // Going back in time re-formats the clock (no stale cache).
    expect(newTimeOrderedId("req_", 24, 1_600_000_000_000) < a).toBe(true);
  });
});
