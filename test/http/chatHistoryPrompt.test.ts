/**
 * The history keeps the first 500 characters (code points, never half of a surrogate pair) of
 * the last user message. The route cuts without splitting the whole string into an array of
 * characters: it must keep exactly what that split kept, for any text.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { historyPromptOf } from "../../src/http/v1/chat";

const byCodePoints = (text: string) => [...text].slice(0, 500).join("");
const user = (content: string) => [{ role: "system" as const, content: "be brief" }, { role: "user" as const, content }];

describe("the chat history's prompt", () => {
  test("is the first 500 characters of the last user message, as splitting into code points gives", () => {
    const unit = fc.constantFrom("a", "é", "😀", "\ud800", "\udc00", "中", "\n");
    fc.assert(
      fc.property(fc.array(unit, { maxLength: 700 }), (units) => {
        const text = units.join("");
        expect(historyPromptOf(user(text))).toBe(byCodePoints(text));
      }),
      { numRuns: 500 },
    );
  });

  test("an emoji straddling the 500th character is kept whole or dropped whole", () => {
    const text = `${"a".repeat(499)}😀😀`;
    expect(historyPromptOf(user(text))).toBe(`${"a".repeat(499)}😀`);
    expect(historyPromptOf(user("x".repeat(10_000)))).toHaveLength(500);
    expect(historyPromptOf([{ role: "user", content: "first" }, { role: "assistant", content: "reply" }, { role: "user", content: "last" }])).toBe("last");
  });
});
