/** The built-in chat engine and its JSON-Schema filler, called directly (no server). */
import { describe, expect, test } from "bun:test";
import { findChatRuleViolation, chatParamsFrom, countChars } from "../../src/core/chatRequest";
import { BUILTIN_CHAT, BUILTIN_SOURCE, type CatalogModel } from "../../src/core/models";
import { BuiltinChatEngine, estimatePromptTokens, estimateTokens, REPLY_PREFIX } from "../../src/engines/builtin/chatEngine";
import { fillFromSchema, MAX_VALUE_CHARS, valueFromSchema } from "../../src/engines/builtin/jsonFromSchema";
import type { ChatMessage } from "../../src/core/engine";

const model: CatalogModel = { id: BUILTIN_CHAT, kind: "chat", ownedBy: "atelier", created: 0, source: BUILTIN_SOURCE, upstreamModel: BUILTIN_CHAT, params: {}, price: 0 };
const engine = new BuiltinChatEngine();
const chat = (content: string, params: Record<string, unknown> = {}, history: ChatMessage[] = []) =>
  engine.chat({ model, messages: [...history, { role: "user", content }], params, signal: new AbortController().signal });

describe("valueFromSchema", () => {
  const fill = (schema: Record<string, unknown>) => valueFromSchema(schema, { text: "hello" });

  test("scalars follow type, enum, const, format and bounds", () => {
    expect(fill({ type: "string" })).toBe("hello");
    expect(fill({ type: "string", maxLength: 3 })).toBe("hel");
    expect(fill({ type: "string", minLength: 8 })).toHaveLength(8);
    expect(fill({ type: "string", format: "date-time" })).toBe("2026-01-01T00:00:00Z");
    expect(fill({ enum: ["b", "a"] })).toBe("b");
    expect(fill({ const: 42 })).toBe(42);
    expect(fill({ type: "integer", minimum: 3, maximum: 9 })).toBe(3);
    expect(fill({ type: "integer", exclusiveMinimum: 3 })).toBe(4);
    expect(fill({ type: "integer", maximum: -5 })).toBe(-5);
    const narrow = fill({ type: "number", exclusiveMinimum: 0, exclusiveMaximum: 0.1 }) as number;
    expect(narrow > 0 && narrow < 0.1).toBe(true);
    expect(fill({ type: "integer", minimum: 1, multipleOf: 5 })).toBe(5);
    expect(fill({ type: "boolean" })).toBe(true);
    expect(fill({ type: "null" })).toBeNull();
    expect(fill({ type: ["null", "integer"] })).toBe(0);
  });

  test("objects get every declared and required property; arrays honour minItems/maxItems", () => {
    expect(
      fill({
        type: "object",
        properties: { a: { type: "array", items: { type: "integer" }, minItems: 3 }, b: { type: "object", properties: { c: { type: "boolean" } } } },
        required: ["a", "extra"],
      }),
    ).toEqual({ a: [0, 0, 0], b: { c: true }, extra: "hello" });
    expect(fill({ type: "array", items: { type: "string" }, maxItems: 0 })).toEqual([]);
    expect(fill({ type: "array", prefixItems: [{ type: "integer" }, { type: "string" }] })).toEqual([0, "hello"]);
    expect((fill({ type: "array", minItems: 1_000_000 }) as unknown[]).length).toBeLessThanOrEqual(20);
  });

  test("anyOf/oneOf take the first non-null branch, allOf merges, $ref resolves", () => {
    expect(fill({ anyOf: [{ type: "null" }, { type: "integer" }] })).toBe(0);
    expect(fill({ oneOf: [{ type: "string" }, { type: "integer" }] })).toBe("hello");
    expect(
      fill({ allOf: [{ type: "object", properties: { a: { type: "integer" } }, required: ["a"] }, { properties: { b: { type: "boolean" } }, required: ["b"] }] }),
    ).toEqual({ a: 0, b: true });
    expect(fill({ type: "object", properties: { p: { $ref: "#/definitions/P" } }, definitions: { P: { enum: ["x"] } } })).toEqual({ p: "x" });
    expect(fill({ $ref: "#/nowhere" })).toBe("hello");
  });

  test("a recursive schema ends at the depth cap instead of looping", () => {
    const tree = { $defs: { node: { type: "object", properties: { child: { $ref: "#/$defs/node" } }, required: ["child"] } }, $ref: "#/$defs/node" };
    const out = JSON.stringify(fill(tree));
    expect(out.length).toBeLessThan(500);
    expect(out).toContain("null");
  });
});

describe("valueFromSchema under hostile schemas", () => {
  test("a huge minLength or arrays nested deep are cut at MAX_VALUE_CHARS instead of exhausting memory", () => {
    const long = fillFromSchema({ type: "string", minLength: 1_000_000_000 }, { text: "hi" });
    expect(long.complete).toBe(false);
    expect((long.value as string).length).toBeLessThanOrEqual(MAX_VALUE_CHARS);
    let nested: Record<string, unknown> = { type: "string", minLength: 50 };
    for (let i = 0; i < 10; i++) nested = { type: "array", minItems: 20, items: nested };
    const deep = fillFromSchema(nested, { text: "hi" });
    expect(deep.complete).toBe(false);
    expect(JSON.stringify(deep.value).length).toBeLessThan(MAX_VALUE_CHARS * 2);
    // An object whose 30 properties each point back at it: 30^12 values without a total bound.
    const wide = { $defs: { n: { type: "object", properties: Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`p${i}`, { $ref: "#/$defs/n" }])) } }, $ref: "#/$defs/n" };
    expect(fillFromSchema(wide, { text: "hi" }).complete).toBe(false);
    expect(fillFromSchema({ type: "string", minLength: 8 }, { text: "hi" })).toEqual({ value: "hixxxxxx", complete: true });
    // allOf branches referring back to the root: 30^12 merges without the budget (the event loop froze).
    expect(fillFromSchema({ allOf: Array.from({ length: 30 }, () => ({ $ref: "#" })) }, { text: "hi" }).complete).toBe(false);
  });

  test("a $ref that is not valid percent-encoding resolves to nothing instead of throwing (it was a 500)", () => {
    expect(fillFromSchema({ type: "object", properties: { a: { $ref: "#/%ZZ" } }, required: ["a"] }, { text: "hi" })).toEqual({ value: { a: "hi" }, complete: true });
  });

  test("the engine answers such a schema with a cut reply and finish_reason length", async () => {
    const res = await chat("hi", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", minLength: 1_000_000_000 } } } });
    expect(res.finishReason).toBe("length");
    expect(res.content.length).toBeLessThanOrEqual(MAX_VALUE_CHARS + 2);
  });
});

describe("BuiltinChatEngine", () => {
  test("restates the last user message and counts tokens with the documented estimate", async () => {
    const history: ChatMessage[] = [{ role: "system", content: "be brief" }, { role: "user", content: "first" }, { role: "assistant", content: "ok" }];
    const r = await chat("Red kettle", {}, history);
    expect(r.content).toBe(`${REPLY_PREFIX}Red kettle`);
    expect(r.finishReason).toBe("stop");
    expect(estimateTokens("abcd")).toBe(1);
    expect(estimateTokens("abcde")).toBe(2);
    // 3 to prime + per message (4 + ceil(chars / 4)): "be brief" 2, "first" 2, "ok" 1, "Red kettle" 3.
    expect(r.usage.promptTokens).toBe(3 + 4 * 4 + 2 + 2 + 1 + 3);
    expect(r.usage.promptTokens).toBe(estimatePromptTokens([...history, { role: "user", content: "Red kettle" }]));
    expect(r.usage.completionTokens).toBe(estimateTokens(r.content));
  });

  test("stop sequences end the reply before them; the smaller token limit cuts it with finish_reason length", async () => {
    expect((await chat("one. two", { stop: [". "] })).content).toBe(`${REPLY_PREFIX}one`);
    const cut = await chat("x".repeat(100), { max_tokens: 10, max_completion_tokens: 3 });
    expect(cut.finishReason).toBe("length");
    expect(cut.usage.completionTokens).toBe(3);
    expect(cut.content).toHaveLength(12);
  });

  test("json_object and json_schema replies are valid JSON", async () => {
    const obj = JSON.parse((await chat("hi", { response_format: { type: "json_object" } })).content);
    expect(obj).toEqual({ reply: `${REPLY_PREFIX}hi`, message_count: 1 });
    const schema = { type: "object", properties: { title: { type: "string" }, score: { type: "number" } }, required: ["title", "score"] };
    const out = JSON.parse((await chat("A title", { response_format: { type: "json_schema", json_schema: { name: "t", schema } } })).content);
    expect(out).toEqual({ title: "A title", score: 0 });
  });
});

describe("chat request rules", () => {
  const msgs = (...contents: string[]): ChatMessage[] => contents.map((content) => ({ role: "user", content }));

  test("total characters are counted in code points", () => {
    expect(countChars("😀é")).toBe(2);
    expect(findChatRuleViolation({ model: "m", messages: msgs("😀".repeat(60_000)) })).toBeNull();
    expect(findChatRuleViolation({ model: "m", messages: msgs("😀".repeat(30_000), "a".repeat(30_001)) })?.param).toBe("messages");
  });

  test("params keep only what was given; a single stop string becomes a list", () => {
    expect(chatParamsFrom({ model: "m", messages: msgs("x"), stop: "END", temperature: null, seed: 0 })).toEqual({ stop: ["END"], seed: 0 });
  });
});
