/** withoutNullFields: OpenAI's clients send null for "not set"; a top-level null is an absent field. */
import { expect, test } from "bun:test";
import { withoutNullFields } from "../../src/core/values";

test("a body without nulls is returned as it is (no copy); one with top-level nulls loses those fields only", () => {
  const clean = { model: "m", messages: [], temperature: 0 };
  expect(withoutNullFields(clean)).toBe(clean);
  const nested = { model: "m", response_format: { type: null } };
  expect(withoutNullFields(nested)).toBe(nested);
  expect(withoutNullFields({ model: "m", temperature: null, stop: null, n: 1 })).toEqual({ model: "m", n: 1 });
  expect(withoutNullFields({ model: null })).toEqual({});
});

test("anything but an object passes through; an own __proto__ field from JSON stays a field", () => {
  for (const value of [null, "text", 3, [null, 1]]) expect(withoutNullFields(value)).toBe(value);
  const parsed = JSON.parse('{"__proto__": {"polluted": true}, "seed": null}') as Record<string, unknown>;
  const result = withoutNullFields(parsed) as Record<string, unknown>;
  expect(Object.keys(result)).toEqual(["__proto__"]);
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
});
