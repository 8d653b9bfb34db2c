/** The built-in chat engine and its JSON-Schema filler, called directly (no server). */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { findChatRuleViolation, chatMessagesFrom, chatParamsFrom, countChars, type ChatMessageInput } from "../../src/core/chatRequest";
import { BUILTIN_CHAT, BUILTIN_SOURCE, type CatalogModel } from "../../src/core/models";
import { BuiltinChatEngine, estimatePromptTokens, estimateTokens, REPLY_PREFIX, STREAM_PIECE_CHARS } from "../../src/engines/builtin/chatEngine";
import { fillFromSchema, MAX_VALUE_CHARS, valueFromSchema } from "../../src/engines/builtin/jsonFromSchema";
import { EngineTimeout, type ChatDelta, type ChatMessage } from "../../src/core/engine";

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

describe("BuiltinChatEngine tools and streaming", () => {
  const weather = { type: "function", function: { name: "get_weather", parameters: { type: "object" } } };

  test("a request with tools is refused by the field at fault, not answered as if there were none", () => {
    expect(engine.requestProblem({ params: { tools: [weather] } })).toEqual({ param: "tools", code: "tools_unsupported", message: expect.stringContaining("builtin-chat calls no tools") });
    expect(engine.requestProblem({ params: { temperature: 1 } })).toBeNull();
  });

  test("a streamed reply arrives in pieces that join to the whole reply, which the result still carries", async () => {
    const deltas: ChatDelta[] = [];
    const said = "a reply long enough for several pieces 😀";
    const r = await engine.chat({ model, messages: [{ role: "user", content: said }], params: {}, signal: new AbortController().signal, onDelta: (d) => deltas.push(d) });
    expect(r.content).toBe(`${REPLY_PREFIX}${said}`);
    expect(deltas.length).toBe(Math.ceil([...r.content].length / STREAM_PIECE_CHARS));
    expect(deltas.map((d) => d.content).join("")).toBe(r.content);
    expect(deltas.every((d) => [...d.content!].length <= STREAM_PIECE_CHARS)).toBe(true);
  });

  test("a stream whose signal aborts stops sending pieces and fails as an upstream call would", async () => {
    const stop = new AbortController();
    const deltas: ChatDelta[] = [];
    const run = engine.chat({ model, messages: [{ role: "user", content: "x".repeat(200) }], params: {}, signal: stop.signal, onDelta: (d) => (deltas.push(d), deltas.length === 2 && stop.abort()) });
    expect(await run.catch((e: unknown) => e)).toBeInstanceOf(EngineTimeout);
    expect(deltas).toHaveLength(2);
  });
});

describe("chat request rules", () => {
  const msgs = (...contents: string[]): ChatMessageInput[] => contents.map((content) => ({ role: "user", content }));
  const rules = { allowStreaming: false };

  test("total characters are counted in code points", () => {
    expect(countChars("😀é")).toBe(2);
    // Lone surrogates count one each, as the string's iterator yields them.
    expect(countChars("\ud83d")).toBe(1);
    expect(countChars("a\ude00\ud83d\ude00\ud83db")).toBe(5);
    expect(countChars("")).toBe(0);
    fc.assert(
      fc.property(fc.array(fc.constantFrom("a", "é", "😀", "\ud83d", "\ude00", "\u{10ffff}"), { maxLength: 40 }), (pieces) => {
        const s = pieces.join("");
        expect(countChars(s)).toBe([...s].length);
      }),
      { numRuns: 2000 },
    );
    expect(findChatRuleViolation({ model: "m", messages: msgs("😀".repeat(60_000)) }, rules)).toBeNull();
    expect(findChatRuleViolation({ model: "m", messages: msgs("😀".repeat(30_000), "a".repeat(30_001)) }, rules)?.param).toBe("messages");
  });

  test("text parts, their separators and tool call arguments count towards the limit", () => {
    const parts = (n: number) => [{ type: "text" as const, text: "a".repeat(n) }, { type: "text" as const, text: "b".repeat(n) }];
    // Two parts of 30000 joined by one line break: 60001.
    expect(findChatRuleViolation({ model: "m", messages: [{ role: "user", content: parts(29_999) }] }, rules)).toBeNull();
    expect(findChatRuleViolation({ model: "m", messages: [{ role: "user", content: parts(30_000) }] }, rules)?.code).toBe("context_length_exceeded");
    const call = { id: "c1", type: "function" as const, function: { name: "f", arguments: "x".repeat(59_990) } };
    const withCall: ChatMessageInput[] = [{ role: "assistant", content: null, tool_calls: [call] }, { role: "tool", content: "y".repeat(10), tool_call_id: "c1" }];
    expect(findChatRuleViolation({ model: "m", messages: withCall }, rules)).toBeNull();
    withCall[1]!.content = "y".repeat(11);
    expect(findChatRuleViolation({ model: "m", messages: withCall }, rules)?.param).toBe("messages");
  });

  test("each role's fields: content unless an assistant's tool calls, tool_call_id on a tool answer, tool_calls on assistants only", () => {
    const check = (messages: ChatMessageInput[]) => findChatRuleViolation({ model: "m", messages }, rules);
    expect(check([{ role: "user", content: null }])).toMatchObject({ param: "messages[0].content", code: "missing_required_parameter" });
    expect(check([{ role: "assistant", content: null }, { role: "user", content: "hi" }])?.param).toBe("messages[0].content");
    expect(check([{ role: "user", content: "hi" }, { role: "tool", content: "42" }])).toMatchObject({ param: "messages[1].tool_call_id" });
    const call = { id: "c1", type: "function" as const, function: { name: "f", arguments: "{}" } };
    expect(check([{ role: "user", content: "hi", tool_calls: [call] }])?.param).toBe("messages[0].tool_calls");
    expect(check([{ role: "user", content: "hi" }, { role: "assistant", content: "ok" }])?.param).toBe("messages[1].role");
    expect(check([{ role: "developer", content: "be brief" }, { role: "user", content: "hi" }, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", content: "42", tool_call_id: "c1" }])).toBeNull();
  });

  test("stream: true is a violation unless streaming is allowed", () => {
    expect(findChatRuleViolation({ model: "m", messages: msgs("x"), stream: true }, rules)?.code).toBe("stream_unsupported");
    expect(findChatRuleViolation({ model: "m", messages: msgs("x"), stream: true }, { allowStreaming: true })).toBeNull();
  });

  test("tool_choice needs tools, and a named function must be one of them", () => {
    const tools = [{ type: "function" as const, function: { name: "get_weather" } }];
    expect(findChatRuleViolation({ model: "m", messages: msgs("x"), tool_choice: "auto" }, rules)?.param).toBe("tool_choice");
    expect(findChatRuleViolation({ model: "m", messages: msgs("x"), tool_choice: "none" }, rules)).toBeNull();
    expect(findChatRuleViolation({ model: "m", messages: msgs("x"), tools, tool_choice: { type: "function", function: { name: "other" } } }, rules)?.param).toBe("tool_choice.function.name");
    expect(findChatRuleViolation({ model: "m", messages: msgs("x"), tools, tool_choice: { type: "function", function: { name: "get_weather" } } }, rules)).toBeNull();
  });

  test("the engine's messages: text parts joined by a line break, developer as system, tool calls and answers kept", () => {
    const call = { id: "c1", type: "function" as const, function: { name: "f", arguments: '{"a":1}' } };
    expect(
      chatMessagesFrom([
        { role: "developer", content: [{ type: "text", text: "be" }, { type: "text", text: "brief" }] },
        { role: "user", content: "hi" },
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", content: [{ type: "text", text: "42" }], tool_call_id: "c1" },
      ]),
    ).toEqual([
      { role: "system", content: "be\nbrief" },
      { role: "user", content: "hi" },
      { role: "assistant", content: "", toolCalls: [call] },
      { role: "tool", content: "42", toolCallId: "c1" },
    ]);
  });

  test("params keep only what was given; a single stop string becomes a list; tools pass as given", () => {
    expect(chatParamsFrom({ model: "m", messages: msgs("x"), stop: "END", temperature: null, seed: 0 })).toEqual({ stop: ["END"], seed: 0 });
    const tools = [{ type: "function" as const, function: { name: "f", parameters: { type: "object" } } }];
    expect(chatParamsFrom({ model: "m", messages: msgs("x"), tools, tool_choice: "required", parallel_tool_calls: false })).toEqual({ tools, tool_choice: "required", parallel_tool_calls: false });
    expect(chatParamsFrom({ model: "m", messages: msgs("x"), tools: [], tool_choice: "none" })).toEqual({});
  });
});
