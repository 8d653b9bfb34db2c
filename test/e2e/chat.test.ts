/**
 * POST /v1/chat/completions against a real listening server, through the official openai
 * client where it matters. One server for the file, with chat_concurrency = 1 and the
 * registered builtin engine wrapped so a test can hold a request open ("hold:") or make the
 * engine fail ("fail:"); everything else reaches the real BuiltinChatEngine. The model
 * `up-chat` is served by a real fake OpenAI upstream on loopback, to see what it receives.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { BuiltinChatEngine } from "../../src/engines/builtin/chatEngine";
import { UpstreamFailed, type ChatEngine, type ChatJob, type ChatResult } from "../../src/core/engine";
import { startTestServer, type TestServer } from "../support/server";
import { startFakeOpenAI } from "../support/fakeUpstreams";

const UPSTREAM_KEY = "sk-upstream-chat-test-0123456789abcdef";
const fake = startFakeOpenAI();

class ControlledChatEngine implements ChatEngine {
  lastJob: ChatJob | undefined;
  private held: { started: PromiseWithResolvers<void>; release: PromiseWithResolvers<void> } | undefined;
  constructor(private readonly inner: ChatEngine) {}

  requestProblem(job: Omit<ChatJob, "signal" | "onDelta">) {
    return this.inner.requestProblem?.(job) ?? null;
  }

  /** Arms the next "hold:" request; resolves `started` when the engine has it. */
  hold() {
    this.held = { started: Promise.withResolvers<void>(), release: Promise.withResolvers<void>() };
    return { started: this.held.started.promise, release: () => this.held?.release.resolve() };
  }

  async chat(job: ChatJob): Promise<ChatResult> {
    this.lastJob = job;
    const last = job.messages[job.messages.length - 1]!.content;
    if (last.startsWith("hold:") && this.held) {
      this.held.started.resolve();
      // Like a real upstream call, give up when the route aborts the job (client gone, deadline).
      const aborted = new Promise<never>((_, reject) => job.signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true }));
      await Promise.race([this.held.release.promise, aborted]);
    }
    if (last.startsWith("fail:")) {
      const e = new UpstreamFailed("every attempt answered 500");
      e.trace = { upstreamId: "fake-upstream", accountId: "acct-1", attempts: 3, upstreamLatencyMs: 42 };
      throw e;
    }
    return this.inner.chat(job);
  }
}

let server: TestServer;
let engine: ControlledChatEngine;
let user: { userId: number; key: string };
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[limits]
chat_concurrency = 1
# Short enough for the deadline test to wait it out, long enough for every other request.
generation_timeout_ms = 3000

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${fake.url}/v1"
max_attempts = 1
accounts = [{ id = "main", api_key = "${UPSTREAM_KEY}" }]

[[models]]
id = "up-chat"
kind = "chat"
upstream = "oa"
upstream_model = "gpt-up"
`,
    customize: (services) => {
      const model = services.catalog.get("builtin-chat")!;
      const registered = services.engines.chatEngine(model);
      // The wiring under test: createServices registered the builtin engine for the built-in models.
      if (!(registered instanceof BuiltinChatEngine)) throw new Error("builtin-chat engine is not registered");
      engine = new ControlledChatEngine(registered);
      services.engines.registerBuiltinChat(engine);
    },
  });
  user = await server.userWithKey({ credits: 0 });
  client = new OpenAI({ apiKey: user.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  await fake.stop();
});

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

async function post(body: unknown, init: { contentType?: string; key?: string } = {}) {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${init.key ?? user.key}`, "content-type": init.contentType ?? "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { res, json: (await res.json()) as Record<string, unknown> };
}

async function expectError(body: unknown, status: number, param: string | null, code?: string) {
  const { res, json } = await post(body);
  const err = (json as unknown as ErrorBody).error;
  expect({ status: res.status, param: err?.param }).toEqual({ status, param });
  if (code) expect(err.code).toBe(code);
  expect(err.type).toEqual(expect.any(String));
  expect(err.message.length).toBeGreaterThan(10);
  return err;
}

const ask = (content: string) => ({ model: "builtin-chat", messages: [{ role: "user", content }] });

describe("the openai client", () => {
  test("chat.completions.create returns a complete chat.completion and hands parameters to the engine", async () => {
    const { data, response } = await client.chat.completions
      .create({
        model: "builtin-chat",
        messages: [
          { role: "system", content: "You write short product titles." },
          { role: "user", content: "Red kettle 1.7L" },
          { role: "assistant", content: "Which style?" },
          { role: "user", content: "Rewrite: Red kettle 1.7L stainless" },
        ],
        temperature: 0.5,
        top_p: 0.9,
        max_completion_tokens: 200,
        stop: ["\n\n"],
        presence_penalty: -1,
        frequency_penalty: 1.5,
        seed: 7,
        user: "shop-42",
      })
      .withResponse();

    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("application/json");
    expect(data.id).toBe(response.headers.get("x-request-id")!);
    // One id per request: the history row and the access-log line carry the same id.
    expect(await server.services.store.requests.recordOf(data.id)).toMatchObject({ id: data.id, status: "succeeded" });
    await Bun.sleep(50); // log lines are written in 20 ms batches
    expect(server.logs.some((line) => line.includes(`"request_id":"${data.id}"`) && line.includes('"path":"/v1/chat/completions"'))).toBe(true);
    expect(data.object).toBe("chat.completion");
    expect(Number.isInteger(data.created)).toBe(true);
    expect(Math.abs(data.created - Date.now() / 1000)).toBeLessThan(600);
    expect(data.model).toBe("builtin-chat");
    expect(data.choices).toHaveLength(1);
    const [choice] = data.choices;
    expect(choice!.index).toBe(0);
    expect(choice!.message.role).toBe("assistant");
    expect(choice!.message.content).toContain("Rewrite: Red kettle 1.7L stainless");
    expect(choice!.message.refusal).toBeNull();
    expect(choice!.logprobs).toBeNull();
    expect(choice!.finish_reason).toBe("stop");
    const usage = data.usage!;
    expect(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0).toBe(true);
    expect(Number.isInteger(usage.completion_tokens) && usage.completion_tokens > 0).toBe(true);
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);

    expect(engine.lastJob!.model.id).toBe("builtin-chat");
    expect(engine.lastJob!.messages).toHaveLength(4);
    expect(engine.lastJob!.params).toEqual({
      temperature: 0.5,
      top_p: 0.9,
      max_completion_tokens: 200,
      stop: ["\n\n"],
      presence_penalty: -1,
      frequency_penalty: 1.5,
      seed: 7,
      user: "shop-42",
    });
  });

  test("response_format json_object: the content parses as a JSON object", async () => {
    const completion = await client.chat.completions.create({
      model: "builtin-chat",
      messages: [{ role: "user", content: "Give me JSON about a kettle" }],
      response_format: { type: "json_object" },
    });
    const parsed: unknown = JSON.parse(completion.choices[0]!.message.content!);
    expect(parsed).toBeObject();
    expect(engine.lastJob!.params.response_format).toEqual({ type: "json_object" });
  });

  test("response_format json_schema: the content has every required property with its declared type", async () => {
    const schema = {
      type: "object",
      properties: {
        title: { type: "string", maxLength: 12 },
        price: { type: "number", minimum: 5 },
        stock: { type: "integer", exclusiveMinimum: 0 },
        tone: { type: "string", enum: ["formal", "casual"] },
        on_sale: { type: "boolean" },
        tags: { type: "array", items: { type: "string" }, minItems: 2 },
        seller: { $ref: "#/$defs/seller" },
        note: { type: ["string", "null"] },
      },
      required: ["title", "price", "stock", "tone", "on_sale", "tags", "seller", "note"],
      additionalProperties: false,
      $defs: { seller: { type: "object", properties: { name: { type: "string" }, rating: { type: "integer", minimum: 1, maximum: 5 } }, required: ["name", "rating"] } },
    };
    const completion = await client.chat.completions.create({
      model: "builtin-chat",
      messages: [{ role: "user", content: "Describe the red kettle" }],
      response_format: { type: "json_schema", json_schema: { name: "product", schema, strict: true } },
    });
    const out = JSON.parse(completion.choices[0]!.message.content!) as Record<string, unknown>;
    expect(Object.keys(out).sort()).toEqual([...schema.required].sort());
    expect(out.title).toBeString();
    expect((out.title as string).length).toBeLessThanOrEqual(12);
    expect(out.price as number).toBeGreaterThanOrEqual(5);
    expect(Number.isInteger(out.stock) && (out.stock as number) > 0).toBe(true);
    expect(out.tone).toBe("formal");
    expect(out.on_sale).toBeBoolean();
    expect(out.tags).toBeArray();
    expect((out.tags as unknown[]).length).toBeGreaterThanOrEqual(2);
    expect((out.tags as unknown[]).every((x) => typeof x === "string")).toBe(true);
    expect(out.seller).toEqual({ name: expect.any(String), rating: expect.any(Number) });
    expect((out.seller as { rating: number }).rating).toBeWithin(1, 6);
    expect(out.note).toBeString();
    // The schema reached the engine intact (not stripped by body cleaning).
    expect(engine.lastJob!.params.response_format).toEqual({ type: "json_schema", json_schema: { name: "product", schema, strict: true } });
  });
});

describe("validation", () => {
  const conversation = (n: number) =>
    Array.from({ length: n }, (_, i) => ({ role: (n - 1 - i) % 2 === 0 ? "user" : "assistant", content: `message ${i}` }));

  test("40 messages pass, 41 fail with param messages", async () => {
    const ok = await post({ model: "builtin-chat", messages: conversation(40) });
    expect(ok.res.status).toBe(200);
    const err = await expectError({ model: "builtin-chat", messages: conversation(41) }, 400, "messages");
    expect(err.message).toContain("40");
    await expectError({ model: "builtin-chat", messages: [] }, 400, "messages");
  });

  test("60000 characters in total pass, 60001 fail with param messages", async () => {
    const split = (total: number) => [
      { role: "system", content: "s".repeat(10_000) },
      { role: "user", content: "u".repeat(total - 10_000) },
    ];
    const ok = await post({ model: "builtin-chat", messages: split(60_000) });
    expect(ok.res.status).toBe(200);
    const err = await expectError({ model: "builtin-chat", messages: split(60_001) }, 400, "messages", "context_length_exceeded");
    expect(err.message).toContain("60000");
    expect(err.message).toContain("60001");
  });

  test("the last message must come from the user", async () => {
    const err = await expectError(
      { model: "builtin-chat", messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }] },
      400,
      "messages[1].role",
    );
    expect(err.message).toContain("'user'");
  });

  test("stream: true is refused with stream_unsupported", async () => {
    await expectError({ ...ask("hi"), stream: true }, 400, "stream", "stream_unsupported");
    const ok = await post({ ...ask("hi"), stream: false });
    expect(ok.res.status).toBe(200);
  });

  test("a missing content, a function message and a tool answer without its call id are refused with the message's path", async () => {
    await expectError({ model: "builtin-chat", messages: [{ role: "user" }] }, 400, "messages[0].content", "missing_required_parameter");
    // A missing role is an error (the schema has no default role).
    await expectError({ model: "builtin-chat", messages: [{ content: "a" }, { role: "user", content: "b" }] }, 400, "messages[0].role");
    const role = await expectError(
      { model: "builtin-chat", messages: [{ role: "user", content: "a" }, { role: "function", name: "f", content: "b" }, { role: "user", content: "c" }] },
      400,
      "messages[1].role",
    );
    expect(role.message).toContain("'system', 'developer', 'user', 'assistant' or 'tool'");
    await expectError({ model: "builtin-chat", messages: [{ role: "user", content: "a" }, { role: "tool", content: "b" }] }, 400, "messages[1].tool_call_id", "missing_required_parameter");
    await expectError({ model: "builtin-chat", messages: [{ role: "user", content: [] }] }, 400, "messages[0].content");
    await expectError({ model: "builtin-chat", messages: [{ role: "user", content: [{ type: "text", text: 5 }] }] }, 400, "messages[0].content");
  });

  test("parameters are checked for type and range", async () => {
    await expectError({ ...ask("hi"), n: 2 }, 400, "n");
    const temp = await expectError({ ...ask("hi"), temperature: 3 }, 400, "temperature");
    expect(temp.message).toContain("0 to 2");
    await expectError({ ...ask("hi"), top_p: "high" }, 400, "top_p");
    await expectError({ ...ask("hi"), max_tokens: 0 }, 400, "max_tokens");
    await expectError({ ...ask("hi"), max_completion_tokens: "5" }, 400, "max_completion_tokens");
    await expectError({ ...ask("hi"), seed: 1.5 }, 400, "seed");
    await expectError({ ...ask("hi"), stop: ["a", "b", "c", "d", "e"] }, 400, "stop");
    await expectError({ ...ask("hi"), response_format: { type: "xml" } }, 400, "response_format.type");
    await expectError({ ...ask("hi"), response_format: { type: "json_schema", json_schema: { name: "bad name!", schema: {} } } }, 400, "response_format.json_schema.name");
    await expectError({ ...ask("hi"), response_format: { type: "json_schema", json_schema: { name: "x" } } }, 400, "response_format.json_schema.schema");
    await expectError({ messages: [{ role: "user", content: "hi" }] }, 400, "model");
  });

  test("a container of the wrong type is reported at that field, not inside a coerced copy of it", async () => {
    const notArray = await expectError({ model: "builtin-chat", messages: "hi" }, 400, "messages");
    expect(notArray.message).toContain("array");
    await expectError({ model: "builtin-chat", messages: { role: "user", content: "hi" } }, 400, "messages");
    await expectError({ model: "builtin-chat", messages: [{ role: "user", content: "a" }, ["user", "hi"]] }, 400, "messages[1]");
    await expectError({ model: "builtin-chat", messages: [5] }, 400, "messages[0]");
    await expectError({ ...ask("hi"), response_format: "json_object" }, 400, "response_format");
    await expectError({ ...ask("hi"), response_format: { type: "json_schema", json_schema: "product" } }, 400, "response_format.json_schema");
    await expectError({ ...ask("hi"), response_format: { type: "json_schema", json_schema: { name: "x", schema: "{}" } } }, 400, "response_format.json_schema.schema");
  });

  test("a missing model or messages is missing_required_parameter; a model of the wrong type is not called missing", async () => {
    await expectError({ messages: [{ role: "user", content: "hi" }] }, 400, "model", "missing_required_parameter");
    await expectError({ model: null, messages: [{ role: "user", content: "hi" }] }, 400, "model", "missing_required_parameter");
    await expectError({ model: "builtin-chat" }, 400, "messages", "missing_required_parameter");
    const wrongType = await expectError({ model: 5, messages: [{ role: "user", content: "hi" }] }, 400, "model", "invalid_value");
    expect(wrongType.message).not.toContain("required");
  });

  test("null parameters, n = 1 and unknown fields are accepted", async () => {
    const { res } = await post({ ...ask("hi"), n: 1, temperature: null, stop: null, response_format: null, logit_bias: { "50256": -100 }, metadata: { a: "b" } });
    expect(res.status).toBe(200);
    expect(engine.lastJob!.params).toEqual({});
  });

  test("unknown model is 404 model_not_found, an image model is 400", async () => {
    await expectError({ ...ask("hi"), model: "gpt-nope" }, 404, "model", "model_not_found");
    await expectError({ ...ask("hi"), model: "builtin-image" }, 400, "model", "model_not_chat");
  });

  test("only JSON bodies are accepted", async () => {
    const { res, json } = await post("model=builtin-chat", { contentType: "application/x-www-form-urlencoded" });
    expect(res.status).toBe(415);
    expect((json as unknown as ErrorBody).error.code).toBe("unsupported_media_type");
  });
});

describe("what OpenAI clients send for text", () => {
  const historyOf = async (userId: number) => await server.services.store.requests.list({ userId });

  test("content as text parts is joined with a line break and developer is read as system, upstream and in builtin-chat", async () => {
    fake.reset();
    const completion = await client.chat.completions.create({
      model: "up-chat",
      messages: [
        { role: "developer", content: [{ type: "text", text: "Be brief." }] },
        { role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: "world" }] },
      ],
    });
    expect(fake.received).toHaveLength(1);
    expect(fake.received[0]!.json!.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello\nworld" },
    ]);
    expect(completion.choices[0]!.message.content).toBe("echo: Hello\nworld");

    const builtin = await client.chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: [{ type: "text", text: "red" }, { type: "text", text: "kettle" }] }] });
    expect(builtin.choices[0]!.message.content).toBe("You said: red\nkettle");
    expect(engine.lastJob!.messages).toEqual([{ role: "user", content: "red\nkettle" }]);
  });

  test("the 60000-character limit counts the joined text of the parts", async () => {
    const parts = (n: number) => [{ type: "text", text: "a".repeat(n) }, { type: "text", text: "b".repeat(n) }];
    expect((await post({ model: "builtin-chat", messages: [{ role: "user", content: parts(29_999) }] })).res.status).toBe(200);
    const err = await expectError({ model: "builtin-chat", messages: [{ role: "user", content: parts(30_000) }] }, 400, "messages", "context_length_exceeded");
    expect(err.message).toContain("60001");
  });

  test("image, audio and file parts are a 400 naming the part, never sent upstream or recorded", async () => {
    fake.reset();
    const fresh = await server.userWithKey();
    const image = { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } };
    const { res, json } = await post({ model: "up-chat", messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, image] }] }, { key: fresh.key });
    const err = (json as unknown as ErrorBody).error;
    expect({ status: res.status, param: err.param, code: err.code }).toEqual({ status: 400, param: "messages[0].content[1]", code: "unsupported_content_part" });
    expect(err.message).toContain("'image_url'");
    await expectError({ ...ask("x"), messages: [{ role: "system", content: [{ type: "input_audio", input_audio: { data: "", format: "wav" } }] }, { role: "user", content: "hi" }] }, 400, "messages[0].content[0]", "unsupported_content_part");
    await expectError({ ...ask("x"), messages: [{ role: "user", content: [{ type: "file", file: {} }] }] }, 400, "messages[0].content[0]", "unsupported_content_part");
    await expectError({ ...ask("x"), messages: [{ role: "user", content: ["hi"] }] }, 400, "messages[0].content[0]", "invalid_value");
    expect(fake.received).toHaveLength(0);
    expect(await historyOf(fresh.userId)).toHaveLength(0);
  });

  test("a two-step tool conversation through the openai client: tools out, tool_calls back, the tool's answer round-trips", async () => {
    fake.reset();
    const tools: OpenAI.ChatCompletionTool[] = [
      { type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, strict: true } },
      { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } },
    ];
    const question: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Oslo?" }];
    const first = await client.chat.completions.create({ model: "up-chat", messages: question, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false });

    const sent = fake.received[0]!.json!;
    expect(sent.tools).toEqual(tools);
    expect(sent.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
    expect(sent.parallel_tool_calls).toBe(false);
    expect(sent.model).toBe("gpt-up");
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call).toEqual({ id: expect.stringMatching(/^call_fake_/), type: "function", function: { name: "get_weather", arguments: JSON.stringify({ query: "Weather in Oslo?" }) } });

    const second = await client.chat.completions.create({
      model: "up-chat",
      messages: [...question, choice.message, { role: "tool", tool_call_id: call.id, content: "18 degrees, sunny" }],
      tools,
    });
    expect(fake.received[1]!.json!.messages).toEqual([
      { role: "user", content: "Weather in Oslo?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", content: "18 degrees, sunny", tool_call_id: call.id },
    ]);
    expect(second.choices[0]!.finish_reason).toBe("stop");
    expect(second.choices[0]!.message.content).toBe("echo: 18 degrees, sunny");
    expect(second.choices[0]!.message.tool_calls).toBeUndefined();
    // The history keeps the last user message, not the tool's answer.
    const [row] = await server.services.store.requests.list({ userId: user.userId });
    expect(row).toMatchObject({ model: "up-chat", status: "succeeded", prompt: "Weather in Oslo?" });
  });

  test("an upstream tool call without an id gets one of ours, which the next turn can answer; asked once", async () => {
    fake.reset();
    fake.queueFaults(UPSTREAM_KEY, { kind: "variant", name: "empty-call-id" });
    const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "lookup" } }];
    // The default retries: a 5xx here would have asked the upstream three times.
    const retrying = new OpenAI({ apiKey: user.key, baseURL: `${server.url}/v1` });
    const first = await retrying.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "find kettles" }], tools });
    expect(fake.received).toHaveLength(1);
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.id).toMatch(/^call_[0-9A-Za-z]{24}$/);
    expect(call).toMatchObject({ type: "function", function: { name: "lookup" } });
    const second = await client.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "find kettles" }, first.choices[0]!.message, { role: "tool", tool_call_id: call.id, content: "none" }], tools });
    expect(second.choices[0]!.message.content).toBe("echo: none");
  });

  test("builtin-chat refuses tools with a 400 instead of ignoring them, before any slot or history row", async () => {
    const fresh = await server.userWithKey();
    const tools = [{ type: "function", function: { name: "get_weather" } }];
    const err = await expectError({ ...ask("hi"), tools }, 400, "tools", "tools_unsupported");
    expect(err.message).toContain("builtin-chat");
    expect(await historyOf(fresh.userId)).toHaveLength(0);
    // tool_choice needs tools; a named function must be one of them; tools are checked for shape.
    await expectError({ ...ask("hi"), tool_choice: "required" }, 400, "tool_choice");
    await expectError({ ...ask("hi"), model: "up-chat", tools, tool_choice: { type: "function", function: { name: "other" } } }, 400, "tool_choice.function.name");
    await expectError({ ...ask("hi"), tools: [{ type: "function", function: { name: "bad name!" } }] }, 400, "tools[0].function.name");
    await expectError({ ...ask("hi"), tools: "get_weather" }, 400, "tools");
    await expectError({ ...ask("hi"), tool_choice: "sometimes" }, 400, "tool_choice");
  });
});

describe("an upstream's refusal", () => {
  const REFUSAL = "I'm sorry, I can't help with that.";

  test("reaches the client as message.refusal with null content, redacted; the row is a success with its token counts", async () => {
    fake.reset();
    fake.queueFaults(UPSTREAM_KEY, { kind: "variant", name: "refusal", message: `${REFUSAL} (key ${UPSTREAM_KEY})` });
    const fresh = await server.userWithKey();
    const openai = new OpenAI({ apiKey: fresh.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const completion = await openai.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "do a bad thing" }] });
    expect(completion.choices[0]!.message).toEqual({ role: "assistant", content: null, refusal: `${REFUSAL} (key [redacted])` });
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    // The model answered (and the upstream counted its tokens): not a failure of the request.
    const [row] = await server.services.store.requests.list({ userId: fresh.userId });
    expect(row).toMatchObject({ status: "succeeded", error_code: null, prompt_tokens: 7, completion_tokens: 3 });
  });

  test("chat.completions.parse() with a json_schema reports the refusal instead of failing to parse null content", async () => {
    fake.reset();
    fake.queueFaults(UPSTREAM_KEY, { kind: "variant", name: "refusal", message: REFUSAL });
    const parsed = await client.chat.completions.parse({
      model: "up-chat",
      messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "t", strict: true, schema: { type: "object", properties: { title: { type: "string" } }, required: ["title"], additionalProperties: false } } },
    });
    expect(parsed.choices[0]!.message).toMatchObject({ content: null, refusal: REFUSAL, parsed: null });
  });

  test("an ordinary reply still says refusal: null", async () => {
    fake.reset();
    const completion = await client.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "hello" }] });
    expect(completion.choices[0]!.message).toEqual({ role: "assistant", content: "echo: hello", refusal: null });
  });
});

describe("engine behaviour", () => {
  test("a json_schema demanding a gigantic reply is cut with finish_reason length; the server stays up", async () => {
    const schema = { type: "object", properties: { title: { type: "string", minLength: 1_000_000_000 } }, required: ["title"] };
    const completion = await client.chat.completions.create({ ...ask("hi"), response_format: { type: "json_schema", json_schema: { name: "huge", schema } } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(completion.choices[0]!.finish_reason).toBe("length");
    expect(completion.choices[0]!.message.content!.length).toBeLessThan(2_000_000);
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  test("a json_schema with self-referencing allOf branches or a malformed $ref is answered, not a frozen server or a 500", async () => {
    const reply = (schema: Record<string, unknown>) =>
      client.chat.completions.create({ ...ask("hi"), response_format: { type: "json_schema", json_schema: { name: "s", schema } } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const branching = await reply({ allOf: Array.from({ length: 30 }, () => ({ $ref: "#" })) });
    expect(branching.choices[0]!.finish_reason).toBe("length");
    const malformed = await reply({ type: "object", properties: { a: { $ref: "#/%ZZ" } }, required: ["a"] });
    expect(JSON.parse(malformed.choices[0]!.message.content!)).toEqual({ a: "hi" });
  });

  test("max_tokens cuts the reply short with finish_reason length", async () => {
    const completion = await client.chat.completions.create({ ...ask("a fairly long sentence that surely needs more than two tokens"), max_tokens: 2 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(completion.choices[0]!.finish_reason).toBe("length");
    expect(completion.usage!.completion_tokens).toBeLessThanOrEqual(2);
    expect(completion.choices[0]!.message.content!.length).toBeLessThanOrEqual(8);
  });
});

describe("cost and history", () => {
  test("a user with zero credits can chat; balance and ledger are unchanged; the request is in the history", async () => {
    const fresh = await server.userWithKey({ credits: 0 });
    const { store } = server.services;
    const { res, json } = await post(ask("free of charge?"), { key: fresh.key });
    expect(res.status).toBe(200);
    expect(await server.balance(fresh.userId)).toBe(0);
    expect(await store.credits.ledger(fresh.userId)).toEqual([]);
    const rows = await store.requests.list({ userId: fresh.userId });
    expect(rows).toHaveLength(1);
    const usage = json.usage as { prompt_tokens: number; completion_tokens: number };
    expect(rows[0]).toMatchObject({
      id: json.id as string,
      kind: "chat",
      endpoint: "/v1/chat/completions",
      model: "builtin-chat",
      status: "succeeded",
      credits_charged: 0,
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      error_code: null,
    });
    expect(rows[0]!.generation_ms).toBeNumber();
    expect(rows[0]!.finished_at).toBeNumber();
  });

  test("an engine failure maps to 502 and is recorded with the upstream trace, still free", async () => {
    const fresh = await server.userWithKey({ credits: 3 });
    const { res, json } = await post(ask("fail: please"), { key: fresh.key });
    expect(res.status).toBe(502);
    expect((json as unknown as ErrorBody).error.code).toBe("upstream_error");
    expect(await server.balance(fresh.userId)).toBe(3);
    const [row] = await server.services.store.requests.list({ userId: fresh.userId });
    expect(row).toMatchObject({
      kind: "chat",
      status: "failed",
      error_code: "upstream_error",
      upstream_id: "fake-upstream",
      account_id: "acct-1",
      attempts: 3,
      upstream_latency_ms: 42,
      credits_charged: 0,
    });
    expect((await server.services.store.credits.ledger(fresh.userId)).filter((l) => l.kind !== "grant")).toEqual([]);
  });
});

describe("chat concurrency", () => {
  test("beyond [limits] chat_concurrency a request gets 429 concurrency_limit_exceeded with retry headers", async () => {
    const held = engine.hold();
    const first = post(ask("hold: the only slot"));
    await held.started;

    const { res, json } = await post(ask("second"));
    expect(res.status).toBe(429);
    expect((json as unknown as ErrorBody).error.code).toBe("concurrency_limit_exceeded");
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(Number(res.headers.get("retry-after-ms"))).toBeGreaterThanOrEqual(1);

    held.release();
    expect((await first).res.status).toBe(200);
    // The slot is free again once the first request finished.
    expect((await post(ask("third"))).res.status).toBe(200);
  });

  test("a client that disconnects aborts the engine, frees the slot and is recorded as client_disconnected", async () => {
    const fresh = await server.userWithKey();
    const held = engine.hold();
    const client = new AbortController();
    const request = fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
      body: JSON.stringify(ask("hold: until I hang up")),
      signal: client.signal,
    }).catch(() => "aborted");
    await held.started;
    client.abort();
    expect(await request).toBe("aborted");

    let row: Awaited<ReturnType<typeof server.services.store.requests.list>>[number] | undefined;
    for (let i = 0; i < 500 && !row; i++) {
      row = (await server.services.store.requests.list({ userId: fresh.userId }))[0];
      if (!row) await Bun.sleep(10);
    }
    expect(row).toMatchObject({ status: "failed", error_code: "client_disconnected" });
    expect((await post(ask("after the hang-up"))).res.status).toBe(200);
  });

  test("past [limits] generation_timeout_ms the engine is aborted: 504 timeout, recorded, slot freed", async () => {
    const fresh = await server.userWithKey();
    engine.hold();
    const { res, json } = await post(ask("hold: never released"), { key: fresh.key });
    expect(res.status).toBe(504);
    expect((json as unknown as ErrorBody).error.code).toBe("timeout");
    expect((await server.services.store.requests.list({ userId: fresh.userId }))[0]).toMatchObject({ status: "failed", error_code: "timeout" });
    // The held engine saw the abort and stopped, so its permit is back.
    let status = 0;
    for (let i = 0; i < 100 && status !== 200; i++) {
      status = (await post(ask("after the deadline"))).res.status;
      if (status !== 200) await Bun.sleep(10);
    }
    expect(status).toBe(200);
  });
});

test("the OpenAPI document describes the route with request, response and error schemas", async () => {
  const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as {
    paths: Record<string, Record<string, { tags: string[]; security: unknown[]; responses: Record<string, unknown>; requestBody?: unknown }>>;
    components: { schemas: Record<string, unknown> };
  };
  const op = doc.paths["/v1/chat/completions"]!.post!;
  expect(op.tags).toEqual(["Chat"]);
  expect(op.security).toEqual([{ bearerAuth: [] }]);
  expect(Object.keys(op.responses).sort()).toEqual(["200", "400", "401", "403", "404", "413", "415", "429", "500", "502", "503", "504"]);
  expect(op.requestBody).toMatchObject({ content: { "application/json": { schema: { $ref: "#/components/schemas/ChatCompletionRequest" } } } });
  expect(doc.components.schemas).toHaveProperty("ChatCompletion");
  const request = doc.components.schemas.ChatCompletionRequest as { properties: Record<string, { items?: { properties: Record<string, { enum?: string[] }> } }> };
  expect(Object.keys(request.properties)).toEqual(expect.arrayContaining(["tools", "tool_choice", "parallel_tool_calls", "stream"]));
  const message = request.properties.messages!.items!.properties;
  expect(message.role!.enum).toEqual(["system", "developer", "user", "assistant", "tool"]);
  expect(Object.keys(message)).toEqual(expect.arrayContaining(["content", "tool_calls", "tool_call_id"]));
  expect(JSON.stringify(message.content)).toContain('"text"');
  const reply = doc.components.schemas.ChatCompletion as { properties: { choices: { items: { properties: { message: { properties: Record<string, unknown> } } } } } };
  expect(reply.properties.choices.items.properties.message.properties).toHaveProperty("tool_calls");
  // The streamed answer (with [chat] allow_streaming) is described beside the JSON one.
  const ok = op.responses["200"] as { content: Record<string, { schema: { description: string; oneOf: { title: string }[] } }> };
  expect(Object.keys(ok.content).sort()).toEqual(["application/json", "text/event-stream"]);
  expect(ok.content["text/event-stream"]!.schema.oneOf.map((s) => s.title)).toEqual(["chat.completion.chunk", "error"]);
  expect(ok.content["text/event-stream"]!.schema.description).toContain("data: [DONE]");
});

describe("streaming ([chat] allow_streaming = true)", () => {
  const STREAM_KEY = "sk-upstream-chat-stream-0123456789abcdef";
  const HEARTBEAT_MS = 40;
  const streamFake = startFakeOpenAI();
  let streaming: TestServer;
  let streamer: { userId: number; key: string };
  let openai: OpenAI;

  beforeAll(async () => {
    streaming = await startTestServer({
      toml: `
[server]
stream_heartbeat_ms = ${HEARTBEAT_MS}

[limits]
generation_timeout_ms = 1500

[chat]
allow_streaming = true

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${streamFake.url}/v1"
max_attempts = 3
accounts = [{ id = "main", api_key = "${STREAM_KEY}" }]

[[models]]
id = "up-chat"
kind = "chat"
upstream = "oa"
upstream_model = "gpt-up"
`,
    });
    streamer = await streaming.userWithKey({ credits: 0 });
    openai = new OpenAI({ apiKey: streamer.key, baseURL: `${streaming.url}/v1`, maxRetries: 0 });
  });

  afterAll(async () => {
    await streaming?.close();
    await streamFake.stop();
  });

  const rowOf = async (id: string) => {
    for (let i = 0; i < 200; i++) {
      const row = (await streaming.services.store.requests.list({ userId: streamer.userId })).find((r) => r.id === id);
      if (row) return row;
      await Bun.sleep(10);
    }
    throw new Error(`no history row ${id}`);
  };

  test("builtin-chat streams its reply in chunks that the openai client iterates to the end; the history row is written", async () => {
    const stream = await openai.chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "stream me a fairly long reply" }], stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe("You said: stream me a fairly long reply");
    expect(chunks.filter((c) => c.choices[0]?.delta.content).length).toBeGreaterThan(3);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.model === "builtin-chat")).toBe(true);
    const finish = chunks.find((c) => c.choices[0]?.finish_reason);
    expect(finish!.choices[0]!.finish_reason).toBe("stop");
    const usage = chunks.at(-1)!.usage!;
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(usage.completion_tokens).toBeGreaterThan(0);
    expect(await rowOf(chunks[0]!.id)).toMatchObject({ status: "succeeded", kind: "chat", prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens });
  });

  test("an upstream's stream passes through: stream and include_usage sent, text chunks relayed, usage recorded", async () => {
    streamFake.reset();
    const stream = await openai.chat.completions.create({ model: "up-chat", messages: [{ role: "developer", content: "brief" }, { role: "user", content: "tell me about kettles" }], stream: true });
    let text = "";
    let id = "";
    let pieces = 0;
    for await (const chunk of stream) {
      id = chunk.id;
      if (chunk.choices[0]?.delta.content) pieces++;
      text += chunk.choices[0]?.delta.content ?? "";
      // Without include_usage from the client, no usage chunk reaches it.
      expect(chunk.usage ?? null).toBeNull();
    }
    expect(text).toBe("echo: tell me about kettles");
    expect(pieces).toBeGreaterThan(2);
    expect(streamFake.received[0]!.json).toMatchObject({ model: "gpt-up", stream: true, stream_options: { include_usage: true }, messages: [{ role: "system", content: "brief" }, { role: "user", content: "tell me about kettles" }] });
    expect(await rowOf(id)).toMatchObject({ status: "succeeded", prompt_tokens: 7, completion_tokens: 3, upstream_id: "oa", account_id: "main" });
  });

  test("an upstream that sends no usage: the history row's token counts are null, not 0", async () => {
    streamFake.reset();
    streamFake.queueFaults(STREAM_KEY, { kind: "variant", name: "no-usage" });
    const stream = await openai.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(await rowOf(chunks[0]!.id)).toMatchObject({ status: "succeeded", prompt_tokens: null, completion_tokens: null });
  });

  test("streamed tool calls: the openai client's stream helper assembles them, finish_reason tool_calls", async () => {
    streamFake.reset();
    const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { query: { type: "string" } } } } }];
    const final = await openai.chat.completions.stream({ model: "up-chat", messages: [{ role: "user", content: "find red kettles" }], tools }).finalChatCompletion();
    expect(streamFake.received[0]!.json).toMatchObject({ tools, stream: true });
    const choice = final.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call).toMatchObject({ id: expect.stringMatching(/^call_fake_/), type: "function", function: { name: "lookup", arguments: JSON.stringify({ query: "find red kettles" }) } });
  });

  test("a streamed refusal passes on as delta.refusal: the stream helper assembles message.refusal, nothing to parse", async () => {
    streamFake.reset();
    const refusal = `I'm sorry, I can't (key ${STREAM_KEY}).`;
    streamFake.queueFaults(STREAM_KEY, { kind: "variant", name: "refusal", message: refusal });
    const final = await openai.chat.completions
      .stream({
        model: "up-chat",
        messages: [{ role: "user", content: "do a bad thing" }],
        response_format: { type: "json_schema", json_schema: { name: "t", strict: true, schema: { type: "object", properties: { title: { type: "string" } }, required: ["title"], additionalProperties: false } } },
      })
      .finalChatCompletion();
    const message = final.choices[0]!.message;
    // Redacted as a stream: the key arrives in 4-character pieces.
    expect(message.refusal).toBe("I'm sorry, I can't (key [redacted]).");
    expect(message.parsed).toBeNull();
    expect(message.content ?? "").toBe("");
    expect(await rowOf(final.id)).toMatchObject({ status: "succeeded", error_code: null });
  });

  test("a streamed tool call without an id gets one of ours on its first fragment", async () => {
    streamFake.reset();
    streamFake.queueFaults(STREAM_KEY, { kind: "variant", name: "empty-call-id" });
    const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "lookup" } }];
    const final = await openai.chat.completions.stream({ model: "up-chat", messages: [{ role: "user", content: "find kettles" }], tools }).finalChatCompletion();
    const call = final.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call).toMatchObject({ id: expect.stringMatching(/^call_[0-9A-Za-z]{24}$/), function: { name: "lookup", arguments: JSON.stringify({ query: "find kettles" }) } });
    expect(streamFake.received).toHaveLength(1);
  });

  test("a key the upstream echoes is redacted even when it arrives split across chunks", async () => {
    streamFake.reset();
    const stream = await openai.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: `my key is ${STREAM_KEY} ok` }], stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("echo: my key is [redacted] ok");
  });

  test("an upstream failure mid-stream ends it with an error event the client raises; not retried; recorded as failed", async () => {
    streamFake.reset();
    streamFake.queueFaults(STREAM_KEY, { kind: "stream-error", message: "the model crashed" });
    const stream = await openai.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "a reply that breaks" }], stream: true });
    let text = "";
    let id = "";
    const error = await (async () => {
      for await (const chunk of stream) {
        id = chunk.id;
        text += chunk.choices[0]?.delta.content ?? "";
      }
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    // The client gets the plain upstream_error answer (the upstream's own words stay in the log).
    expect((error as InstanceType<typeof OpenAI.APIError>).code).toBe("upstream_error");
    expect(text.length).toBeGreaterThan(0);
    // Part of the reply was already passed on: another attempt would send it twice.
    expect(streamFake.received).toHaveLength(1);
    expect(await rowOf(id)).toMatchObject({ status: "failed", error_code: "upstream_error" });
  });

  test("on the wire: data lines, a heartbeat comment while the upstream is quiet, [DONE] last", async () => {
    streamFake.reset();
    streamFake.setEventGapMs(HEARTBEAT_MS * 3);
    const res = await fetch(`${streaming.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${streamer.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "slow" }], stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toStartWith("text/event-stream");
    const body = await res.text();
    expect(body).toContain(": keep-alive\n\n");
    expect(body).toEndWith("data: [DONE]\n\n");
    const data = body.split("\n\n").filter((e) => e.startsWith("data: ") && e !== "data: [DONE]");
    expect(data.map((e) => (JSON.parse(e.slice(6)) as OpenAI.ChatCompletionChunk).choices[0]?.delta.content ?? "").join("")).toBe("echo: slow");
    streamFake.setEventGapMs(0);
  });

  test("past generation_timeout_ms the stream ends with a timeout error event and no [DONE]", async () => {
    streamFake.reset();
    streamFake.setEventGapMs(300);
    const res = await fetch(`${streaming.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${streamer.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "up-chat", messages: [{ role: "user", content: "x".repeat(60) }], stream: true }),
    });
    const abandonedBefore = streamFake.chatStreamsAbandoned;
    const body = await res.text();
    expect(body).not.toContain("[DONE]");
    const last = body.trim().split("\n\n").at(-1)!;
    expect(JSON.parse(last.slice("data: ".length))).toMatchObject({ error: { code: "timeout", type: expect.any(String), message: expect.any(String) } });
    // The deadline aborted the upstream request too.
    for (let i = 0; i < 200 && streamFake.chatStreamsAbandoned === abandonedBefore; i++) await Bun.sleep(10);
    expect(streamFake.chatStreamsAbandoned).toBe(abandonedBefore + 1);
    streamFake.setEventGapMs(0);
  });

  test("a client that disconnects mid-stream aborts the upstream request; the row says client_disconnected", async () => {
    streamFake.reset();
    streamFake.setEventGapMs(50);
    const abandonedBefore = streamFake.chatStreamsAbandoned;
    const stream = await openai.chat.completions.create({ model: "up-chat", messages: [{ role: "user", content: "y".repeat(80) }], stream: true });
    let id = "";
    let seen = 0;
    for await (const chunk of stream) {
      id = chunk.id;
      if (++seen === 3) break; // leaving the loop aborts the client's request
    }
    for (let i = 0; i < 200 && streamFake.chatStreamsAbandoned === abandonedBefore; i++) await Bun.sleep(10);
    expect(streamFake.chatStreamsAbandoned).toBe(abandonedBefore + 1);
    expect(await rowOf(id)).toMatchObject({ status: "failed", error_code: "client_disconnected" });
    streamFake.setEventGapMs(0);
  });

  test("refusals before the engine starts are the usual JSON errors with their status", async () => {
    const res = await fetch(`${streaming.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${streamer.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }], stream: true, tools: [{ type: "function", function: { name: "f" } }] }),
    });
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toStartWith("application/json");
    expect(((await res.json()) as ErrorBody).error).toMatchObject({ param: "tools", code: "tools_unsupported" });
  });
});
