/**
 * API key limits on a real listening server, through the official `openai` client and fetch:
 * an expired key is refused (401 api_key_expired), a model outside the allow-list is refused
 * for every image path (sync, async, stream, edits) and chat with 403 param "model" and never
 * charged, /v1/models shows only the allowed models, and a credit cap stops the key (402
 * key_credit_cap_reached), checked inside the charge so two concurrent requests at cap − 1
 * cannot both pass. /v1/me reports the key's limits and spend.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI, { toFile } from "openai";
import { addUser, createKey } from "../../src/core/accounts";
import { UpstreamFailed } from "../../src/core/engine";
import { NO_KEY_LIMITS, type KeyLimits } from "../../src/core/keyLimits";
import { startTestServer, type TestServer } from "../support/server";
import { ControlledEngine, makePng } from "../support/images";
import { until } from "../support/until";

let server: TestServer;
const engine = new ControlledEngine();

beforeAll(async () => {
  server = await startTestServer({
    config: (c) => {
      c.server.log_requests = false;
      c.limits.per_user_concurrency = 4;
    },
    customize: (s) => s.engines.registerBuiltinImage(engine),
  });
});
afterAll(() => server.close());

const store = () => server.services.store;

/** A user with `credits` and one key with the given limits. */
async function keyHolder(credits: number, limits: Partial<KeyLimits>) {
  const user = await addUser(store(), Date.now, { email: `limits-${crypto.randomUUID()}@example.com`, credits });
  const { key, row } = await createKey(store(), Date.now, user.id, "limited", { ...NO_KEY_LIMITS, ...limits });
  return { userId: user.id, key: key.secret, keyId: row.id };
}

const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });

async function post(key: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}/v1${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string | null; param: string | null; type: string } } & Record<string, unknown>, headers: res.headers };
}

const ledgerRows = async (userId: number) => await store().credits.ledger(userId, 1000);
const requestCount = async (userId: number) => await store().requests.count({ userId });

describe("expiry", () => {
  test("an expired key answers 401 api_key_expired on every route; one that has not expired works", async () => {
    const expired = await keyHolder(5, { expiresAt: Date.now() - 1 });
    for (const call of [() => client(expired.key).models.list(), () => client(expired.key).images.generate({ prompt: "x" })]) {
      const e = (await call().catch((err: unknown) => err)) as InstanceType<typeof OpenAI.AuthenticationError>;
      expect(e).toBeInstanceOf(OpenAI.AuthenticationError);
      expect(e.status).toBe(401);
      expect(e.code).toBe("api_key_expired");
    }
    expect(await server.balance(expired.userId)).toBe(5);
    expect(await requestCount(expired.userId)).toBe(0);

    const fresh = await keyHolder(5, { expiresAt: Date.now() + 60_000 });
    const page = await client(fresh.key).models.list();
    expect(page.data.length).toBeGreaterThan(0);
  });
});

describe("model allow-list", () => {
  test("images outside the list: 403 model_not_allowed (param model) on sync, async, stream and edits; nothing charged or recorded", async () => {
    const h = await keyHolder(10, { allowedModels: ["builtin-chat"] });
    const calls = engine.calls.length;
    const expectRefused = (r: { status: number; body: { error?: { code: string | null; param: string | null; type: string } } }) => {
      expect(r.status).toBe(403);
      expect(r.body.error).toMatchObject({ code: "model_not_allowed", param: "model", type: "permission_error" });
    };
    expectRefused(await post(h.key, "/images/generations", { prompt: "a cat", model: "builtin-image" }));
    // No model: the default image model, which the list does not name either.
    expectRefused(await post(h.key, "/images/generations", { prompt: "a cat" }));
    expectRefused(await post(h.key, "/images/generations", { prompt: "a cat", model: "builtin-image" }, { prefer: "respond-async" }));
    expectRefused(await post(h.key, "/images/generations", { prompt: "a cat", model: "builtin-image", stream: true }));
    expectRefused(await post(h.key, "/images/edits", { prompt: "a cat", model: "builtin-image", images: [{ image_url: `data:image/png;base64,${Buffer.from(makePng(8, 8)).toString("base64")}` }] }));
    const e = (await client(h.key)
      .images.edit({ model: "builtin-image", prompt: "a cat", image: await toFile(makePng(16, 16), "in.png", { type: "image/png" }) })
      .catch((err: unknown) => err)) as InstanceType<typeof OpenAI.PermissionDeniedError>;
    expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(e.code).toBe("model_not_allowed");
    expect(e.param).toBe("model");

    expect(engine.calls.length).toBe(calls);
    expect(await server.balance(h.userId)).toBe(10);
    expect((await ledgerRows(h.userId)).filter((l) => l.kind !== "grant")).toEqual([]);
    expect(await requestCount(h.userId)).toBe(0);
    expect(await store().tasks.list(h.userId, { limit: 10 })).toEqual([]);

    // The allowed model works with the same key.
    const chat = await client(h.key).chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] });
    expect(chat.choices[0]!.message.content).toBeTruthy();
  });

  test("chat outside the list: 403 model_not_allowed; images on the list work and are charged", async () => {
    const h = await keyHolder(3, { allowedModels: ["builtin-image"] });
    const e = (await client(h.key).chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] }).catch((err: unknown) => err)) as InstanceType<
      typeof OpenAI.PermissionDeniedError
    >;
    expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(e.code).toBe("model_not_allowed");
    expect(e.param).toBe("model");
    expect(await requestCount(h.userId)).toBe(0);

    const img = await client(h.key).images.generate({ model: "builtin-image", prompt: "a cat" });
    expect(img.data?.[0]?.b64_json).toBeTruthy();
    expect(await server.balance(h.userId)).toBe(2);
  });

  test("/v1/models lists only the allowed models; retrieving another answers 404 model_not_found", async () => {
    const h = await keyHolder(0, { allowedModels: ["builtin-image"] });
    const ids: string[] = [];
    for await (const m of client(h.key).models.list()) ids.push(m.id);
    expect(ids).toEqual(["builtin-image"]);
    expect((await client(h.key).models.retrieve("builtin-image")).id).toBe("builtin-image");
    const e = (await client(h.key).models.retrieve("builtin-chat").catch((err: unknown) => err)) as InstanceType<typeof OpenAI.NotFoundError>;
    expect(e).toBeInstanceOf(OpenAI.NotFoundError);
    expect(e.code).toBe("model_not_found");

    const open = await keyHolder(0, {});
    const all: string[] = [];
    for await (const m of client(open.key).models.list()) all.push(m.id);
    expect(all).toEqual(["builtin-image", "builtin-chat"]);
  });
});

describe("credit cap", () => {
  test("the key stops at its cap with 402 key_credit_cap_reached (balance untouched); refunds give the spend back", async () => {
    const h = await keyHolder(10, { creditCap: 2 });
    engine.behave = async (job) => {
      if (job.prompt === "fail") throw new UpstreamFailed("scripted failure");
      return engine.png(job);
    };
    try {
      await client(h.key).images.generate({ prompt: "one" });
      // A failed request is refunded: it does not count against the cap.
      const failed = (await client(h.key).images.generate({ prompt: "fail" }).catch((err: unknown) => err)) as InstanceType<typeof OpenAI.APIError>;
      expect(failed.status).toBe(502);
      await client(h.key).images.generate({ prompt: "two" });
      expect(await server.balance(h.userId)).toBe(8);

      const calls = engine.calls.length;
      for (const extra of [{}, { prefer: "respond-async" }] as Record<string, string>[]) {
        const r = await post(h.key, "/images/generations", { prompt: "three" }, extra);
        expect(r.status).toBe(402);
        expect(r.body.error).toMatchObject({ code: "key_credit_cap_reached", type: "insufficient_credits", param: null });
        expect(r.headers.get("x-should-retry")).toBe("false");
      }
      expect(engine.calls.length).toBe(calls);
      expect(await server.balance(h.userId)).toBe(8);
      expect(await store().keys.spent(h.keyId)).toBe(2);
      // The ledger still sums to the balance, with one charge per charged request.
      expect(await store().credits.ledgerSum(h.userId)).toBe(8);
      expect((await ledgerRows(h.userId)).filter((l) => l.kind === "charge").length).toBe(3);

      // Another key of the same user is not capped.
      const other = await createKey(store(), Date.now, h.userId, "uncapped");
      await client(other.key.secret).images.generate({ prompt: "four" });
      expect(await server.balance(h.userId)).toBe(7);
    } finally {
      engine.behave = async (job) => engine.png(job);
    }
  });

  test("two concurrent requests at cap − 1: exactly one is charged", async () => {
    const h = await keyHolder(10, { creditCap: 3 });
    await client(h.key).images.generate({ prompt: "a" });
    await client(h.key).images.generate({ prompt: "b" });
    // Hold the engine so both requests are in flight together: the first charge has landed (and
    // is pending) when the second one reaches its charge.
    engine.hold("succeed");
    try {
      const both = [0, 1].map((i) => post(h.key, "/images/generations", { prompt: `race ${i}` }));
      await until(() => engine.waiting >= 1, "one request to reach the engine");
      // Give the other request time to reach its charge (it cannot reach the engine).
      await until(async () => (await store().requests.count({ userId: h.userId })) >= 3, "the first charge");
      await Bun.sleep(200);
      engine.releaseAll();
      const results = await Promise.all(both);
      expect(results.map((r) => r.status).sort()).toEqual([200, 402]);
      expect(results.find((r) => r.status === 402)!.body.error!.code).toBe("key_credit_cap_reached");
    } finally {
      engine.releaseAll();
      engine.behave = async (job) => engine.png(job);
    }
    expect(await server.balance(h.userId)).toBe(7);
    expect(await store().keys.spent(h.keyId)).toBe(3);
    expect(await store().credits.ledgerSum(h.userId)).toBe(7);
  });
});

describe("/v1/me", () => {
  test("the user, balance and this key's name, limits and spend", async () => {
    const expiresAt = Date.now() + 86_400_000;
    const h = await keyHolder(6, { creditCap: 4, allowedModels: ["builtin-image"], expiresAt });
    await client(h.key).images.generate({ prompt: "x" });
    const me = await client(h.key).get("/me");
    const row = (await store().keys.listForUser(h.userId))[0]!;
    expect(me).toEqual({
      object: "me",
      user: { id: h.userId, email: expect.stringContaining("@example.com"), role: "user" },
      balance: 5,
      key: {
        name: "limited",
        prefix: row.prefix,
        created_at: Math.floor(row.created_at / 1000),
        expires_at: Math.floor(expiresAt / 1000),
        credit_cap: 4,
        credits_spent: 1,
        credits_remaining: 3,
        allowed_models: ["builtin-image"],
      },
    });
    const open = await keyHolder(2, {});
    expect(await client(open.key).get("/me")).toMatchObject({ balance: 2, key: { credit_cap: null, credits_remaining: null, expires_at: null, allowed_models: null, credits_spent: 0 } });
    const res = await fetch(`${server.url}/v1/me`);
    expect(res.status).toBe(401);
  });
});
