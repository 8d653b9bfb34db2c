/**
 * The engine registry resolves a model by its source, a tagged union: the built-in engines and
 * the upstream ones are registered apart, so no upstream id can take a built-in model over.
 * Before, the string "builtin" was both the built-in sentinel and a legal upstream id, and an
 * [[upstreams]] entry with that id silently served builtin-image.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { ConfigError } from "../../src/config";
import type { ChatEngine, ImageEngine } from "../../src/core/engine";
import { BUILTIN_IMAGE, BUILTIN_SOURCE, describeSource, upstreamIdOf, upstreamSource, type CatalogModel } from "../../src/core/models";
import { BuiltinImageEngine } from "../../src/engines/builtin/imageEngine";
import { OpenAIEngine } from "../../src/engines/openai";
import { EngineRegistry } from "../../src/engines/registry";
import { startFakeOpenAI } from "../support/fakeUpstreams";
import { readPng } from "../support/images";
import { configFromToml, startTestServer, type TestServer } from "../support/server";

const model = (id: string, source: CatalogModel["source"], kind: CatalogModel["kind"] = "image"): CatalogModel => ({
  id,
  kind,
  ownedBy: "test",
  created: 0,
  source,
  upstreamModel: id,
  params: {},
  price: kind === "image" ? 1 : 0,
});

const imageEngine = (): ImageEngine => ({ generate: () => Promise.reject(new Error("unused")), edit: () => Promise.reject(new Error("unused")) });
const chatEngine = (): ChatEngine => ({ chat: () => Promise.reject(new Error("unused")) });

describe("EngineRegistry", () => {
  test('an upstream registered under the id "builtin" does not serve the built-in models', () => {
    const registry = new EngineRegistry();
    const builtinImage = imageEngine();
    const builtinChat = chatEngine();
    const upstreamImage = imageEngine();
    const upstreamChat = chatEngine();
    registry.registerBuiltinImage(builtinImage);
    registry.registerBuiltinChat(builtinChat);
    // Config refuses this id; the registry does not rely on that.
    registry.registerUpstreamImage("builtin", upstreamImage);
    registry.registerUpstreamChat("builtin", upstreamChat);
    expect(registry.imageEngine(model(BUILTIN_IMAGE, BUILTIN_SOURCE))).toBe(builtinImage);
    expect(registry.chatEngine(model("builtin-chat", BUILTIN_SOURCE, "chat"))).toBe(builtinChat);
    expect(registry.imageEngine(model("pic", upstreamSource("builtin")))).toBe(upstreamImage);
    expect(registry.chatEngine(model("talk", upstreamSource("builtin"), "chat"))).toBe(upstreamChat);
  });

  test("nothing registered: no engine, for either source", () => {
    const registry = new EngineRegistry();
    registry.registerUpstreamImage("oa", imageEngine());
    expect(registry.imageEngine(model(BUILTIN_IMAGE, BUILTIN_SOURCE))).toBeUndefined();
    expect(registry.imageEngine(model("pic", upstreamSource("other")))).toBeUndefined();
    expect(registry.chatEngine(model("talk", upstreamSource("oa"), "chat"))).toBeUndefined();
  });

  test("a source in words and its upstream id", () => {
    expect(describeSource(BUILTIN_SOURCE)).toBe("the built-in engines");
    expect(describeSource(upstreamSource("oa"))).toBe("upstream 'oa'");
    expect(upstreamIdOf(model("pic", upstreamSource("oa")))).toBe("oa");
    expect(upstreamIdOf(model(BUILTIN_IMAGE, BUILTIN_SOURCE))).toBeUndefined();
  });
});

describe("a server with an upstream whose id starts with builtin", () => {
  const fake = startFakeOpenAI();
  let server: TestServer;
  const upstreamToml = (id: string) => `
[[upstreams]]
id = "${id}"
kind = "openai"
base_url = "${fake.url}/v1"
accounts = [ { id = "a", api_key = "sk-registry-test-0123456789" } ]

[[models]]
id = "pic"
kind = "image"
upstream = "${id}"
`;

  beforeAll(async () => {
    server = await startTestServer({ toml: upstreamToml("builtin2"), config: (c) => void (c.server.log_requests = false) });
  });
  afterAll(async () => {
    await server.close();
    await fake.stop();
  });
  beforeEach(() => fake.reset());

  test("builtin-image stays the built-in renderer; the upstream serves only its own model", async () => {
    const { catalog, engines } = server.services;
    expect(catalog.get(BUILTIN_IMAGE)!.source).toEqual({ kind: "builtin" });
    expect(catalog.get("pic")!.source).toEqual({ kind: "upstream", upstreamId: "builtin2" });
    expect(engines.imageEngine(catalog.get(BUILTIN_IMAGE)!)).toBeInstanceOf(BuiltinImageEngine);
    expect(engines.imageEngine(catalog.get("pic")!)).toBeInstanceOf(OpenAIEngine);

    const u = await server.userWithKey({ credits: 2 });
    const client = new OpenAI({ apiKey: u.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const drawn = await client.images.generate({ model: BUILTIN_IMAGE, prompt: "a lighthouse", size: "64x64" as "1024x1024" });
    expect(readPng(new Uint8Array(Buffer.from(drawn.data![0]!.b64_json!, "base64"))).width).toBe(64);
    expect(fake.received).toHaveLength(0);

    await client.images.generate({ model: "pic", prompt: "a lighthouse", size: "1024x1024" });
    expect(fake.received.map((r) => [r.path, r.json?.model])).toEqual([["/v1/images/generations", "pic"]]);
    expect(await server.balance(u.userId)).toBe(0);
  });

  test('the same configuration with the id "builtin" is refused at startup, naming the key', () => {
    expect(() => configFromToml(upstreamToml("builtin"))).toThrow(ConfigError);
    expect(() => configFromToml(upstreamToml("builtin"))).toThrow('upstreams[0].id: "builtin" is reserved for the built-in engines');
  });
});
