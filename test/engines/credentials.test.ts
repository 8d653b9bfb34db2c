/**
 * One credentials rule for every upstream kind: api_key → Bearer, else username + password →
 * Basic, else nothing; and every credential we send is a secret the redactor knows.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { AccountAuth, accountSecrets, authorizationFor, sendsOnlyApiKey } from "../../src/engines/credentials";
import { SecretRedactor } from "../../src/engines/redact";
import { registerUpstreamEngines } from "../../src/engines/upstreams";
import { EngineRegistry } from "../../src/engines/registry";
import { ModelCatalog } from "../../src/core/models";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { startFakeOpenAI, startFakeWebUI } from "../support/fakeUpstreams";
import { configFromToml } from "../support/server";

const KEY = "sk-credentials-test-0123456789";
const PASSWORD = "webui-password-0123";

describe("authorizationFor", () => {
  test("the documented order: api_key as Bearer, else username + password as Basic, else nothing", () => {
    expect(authorizationFor({ api_key: KEY, username: "u", password: PASSWORD })).toBe(`Bearer ${KEY}`);
    expect(authorizationFor({ api_key: KEY })).toBe(`Bearer ${KEY}`);
    expect(authorizationFor({ username: "u", password: PASSWORD })).toBe(`Basic ${btoa(`u:${PASSWORD}`)}`);
    expect(authorizationFor({ api_key: "", username: "u", password: PASSWORD })).toBe(`Basic ${btoa(`u:${PASSWORD}`)}`);
    expect(authorizationFor({ username: "", password: PASSWORD })).toBe(`Basic ${btoa(`:${PASSWORD}`)}`);
    expect(authorizationFor({ username: "u" })).toBeUndefined();
    expect(authorizationFor({ password: PASSWORD })).toBeUndefined();
    expect(authorizationFor({})).toBeUndefined();
  });

  test("Basic: Latin-1 bytes as always; a password beyond Latin-1 goes as UTF-8 instead of failing", () => {
    expect(authorizationFor({ username: "u", password: "café-pass" })).toBe(`Basic ${btoa("u:café-pass")}`);
    expect(authorizationFor({ username: "u", password: "пароль-🎨" })).toBe(`Basic ${Buffer.from("u:пароль-🎨", "utf8").toString("base64")}`);
  });

  test("sendsOnlyApiKey flags an account that sets both", () => {
    expect(sendsOnlyApiKey({ api_key: KEY, username: "u", password: PASSWORD })).toBe(true);
    expect(sendsOnlyApiKey({ api_key: KEY })).toBe(false);
    expect(sendsOnlyApiKey({ username: "u", password: PASSWORD })).toBe(false);
  });
});

describe("AccountAuth", () => {
  test("headers per account id; unknown or credential-less accounts get none; callers get their own copy", () => {
    const auth = new AccountAuth([
      { id: "k", api_key: KEY },
      { id: "b", username: "u", password: PASSWORD },
      { id: "n" },
    ]);
    expect(auth.headersFor("k")).toEqual({ authorization: `Bearer ${KEY}` });
    expect(auth.headersFor("b")).toEqual({ authorization: `Basic ${btoa(`u:${PASSWORD}`)}` });
    expect(auth.headersFor("n")).toEqual({});
    expect(auth.headersFor("missing")).toEqual({});
    auth.headersFor("k").authorization = "changed";
    expect(auth.headersFor("k")).toEqual({ authorization: `Bearer ${KEY}` });
  });
});

describe("accountSecrets", () => {
  test("key, password and both spellings of the Basic credential", () => {
    expect(accountSecrets({ api_key: KEY })).toEqual([KEY]);
    expect(accountSecrets({ username: "u", password: "café-pass" })).toEqual([
      "café-pass",
      Buffer.from("u:café-pass", "utf8").toString("base64"),
      btoa("u:café-pass"),
    ]);
    expect(accountSecrets({ username: "u" })).toEqual([]);
  });

  test("whatever Authorization we send, the redactor removes its credential", () => {
    for (const account of [{ api_key: KEY }, { username: "u", password: PASSWORD }, { username: "u", password: "café-pass" }, { username: "u", password: "пароль-🎨-long" }]) {
      const header = authorizationFor(account)!;
      const credential = header.slice(header.indexOf(" ") + 1);
      const redactor = SecretRedactor.forAccounts([account]);
      expect(redactor.answer(`echo: ${credential}`)).not.toContain(credential);
      expect(redactor.leaks(credential)).toBe(true);
    }
  });
});

describe("the same account sends the same credentials on every kind", () => {
  const openai = startFakeOpenAI();
  const webui = startFakeWebUI();
  afterAll(async () => {
    await openai.stop();
    await webui.stop();
  });
  beforeEach(() => {
    openai.reset();
    webui.reset();
  });

  test("an account with both api_key and username/password sends Bearer to an openai and to a sdwebui upstream, and startup warns", async () => {
    const account = `{ id = "both", api_key = "${KEY}", username = "alice", password = "${PASSWORD}" }`;
    const config = configFromToml(`
[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${openai.url}/v1"
accounts = [ ${account} ]

[[upstreams]]
id = "sd"
kind = "sdwebui"
base_url = "${webui.url}"
accounts = [ ${account} ]

[[models]]
id = "oa-pic"
kind = "image"
upstream = "oa"

[[models]]
id = "sd-pic"
kind = "image"
upstream = "sd"
`);
    const registry = new EngineRegistry();
    const logs: string[] = [];
    const store = createStore(openDatabase(":memory:"), latestVersion());
    const pools = registerUpstreamEngines(config, registry, { store: store.upstreams, clock: Date.now, logger: createLogger((l) => logs.push(l)) });
    const catalog = new ModelCatalog(config);
    for (const id of ["oa-pic", "sd-pic"]) {
      const model = catalog.get(id)!;
      await registry.imageEngine(model)!.generate({ model, prompt: "p", size: { width: 32, height: 32 }, quality: "auto", images: [], extra: {}, signal: new AbortController().signal });
    }
    await pools.close();
    expect(openai.received.map((r) => r.authorization)).toEqual([`Bearer ${KEY}`]);
    expect(webui.received.map((r) => r.authorization)).toEqual([`Bearer ${KEY}`]);
    const warnings = logs.filter((l) => l.includes("only the api_key is sent"));
    expect(warnings).toHaveLength(2);
    expect(warnings.join("\n")).not.toContain(KEY);
    expect(warnings.join("\n")).not.toContain(PASSWORD);
  });
});
