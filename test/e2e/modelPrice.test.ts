/**
 * A model's credit price over the wire: `/v1/models` shows it as `x_atelier_price`, and every
 * way of asking for an image (synchronous, streamed, async, idempotent) charges exactly that,
 * refunds exactly that when the upstream fails, and answers 402 when the balance is below it.
 * A real server, the official openai client, and a fake OpenAI upstream on loopback.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeOpenAI } from "../support/fakeUpstreams";
import { until } from "../support/until";
import { startTestServer, type TestServer } from "../support/server";

const UPSTREAM_KEY = "sk-upstream-price-test-0123456789";
const fake = startFakeOpenAI();
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
log_requests = false
builtin_image_price = 3

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${fake.url}/v1"
max_attempts = 1
accounts = [{ id = "main", api_key = "${UPSTREAM_KEY}" }]

[[models]]
id = "priced"
kind = "image"
upstream = "oa"
upstream_model = "gpt-image-1"
price = 2

[[models]]
id = "free"
kind = "image"
upstream = "oa"
upstream_model = "gpt-image-1"
price = 0

[[models]]
id = "plain"
kind = "image"
upstream = "oa"
upstream_model = "gpt-image-1"
`,
  });
});
afterAll(async () => {
  await server.close();
  await fake.stop();
});

const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
const ledgerKinds = async (userId: number) =>
  (await server.services.store.credits.ledger(userId))
    .reverse()
    .filter((l) => l.request_id)
    .map((l) => [l.kind, l.amount]);

describe("/v1/models", () => {
  test("lists each model's price as x_atelier_price: configured, default 1, 0 for free and chat models", async () => {
    const { key } = await server.userWithKey();
    const res = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as { data: { id: string; x_atelier_price: number }[] };
    expect(Object.fromEntries(body.data.map((m) => [m.id, m.x_atelier_price]))).toEqual({ "builtin-image": 3, "builtin-chat": 0, priced: 2, free: 0, plain: 1 });
    const one = (await client(key).models.retrieve("priced")) as unknown as { x_atelier_price: number };
    expect(one.x_atelier_price).toBe(2);
  });
});

describe("the charge and the refund use the price", () => {
  test("a synchronous success costs the price; an upstream failure refunds exactly it", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    await client(key).images.generate({ model: "priced", prompt: "a lighthouse" });
    expect(await server.balance(userId)).toBe(3);
    fake.queueFaults(UPSTREAM_KEY, { kind: "status", status: 500, message: "upstream down" });
    const e = await client(key).images.generate({ model: "priced", prompt: "a lighthouse" }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OpenAI.APIError);
    expect(await server.balance(userId)).toBe(3);
    expect(await ledgerKinds(userId)).toEqual([["charge", -2], ["charge", -2], ["refund", 2]]);
    expect(await server.services.store.credits.ledgerSum(userId)).toBe(3);
  });

  test("the built-in model charges [server] builtin_image_price and a model without a price charges 1", async () => {
    const { key, userId } = await server.userWithKey({ credits: 10 });
    await client(key).images.generate({ model: "builtin-image", prompt: "dunes", size: "256x256" });
    expect(await server.balance(userId)).toBe(7);
    await client(key).images.generate({ model: "plain", prompt: "dunes" });
    expect(await server.balance(userId)).toBe(6);
  });

  test("a free model works at a zero balance and writes no ledger row", async () => {
    const { key, userId } = await server.userWithKey({ credits: 0 });
    const res = await client(key).images.generate({ model: "free", prompt: "a free sketch" });
    expect(res.data?.[0]?.b64_json).toBeTruthy();
    expect(await server.balance(userId)).toBe(0);
    expect(await ledgerKinds(userId)).toEqual([]);
  });

  test("a streamed request costs the price once", async () => {
    const { key, userId } = await server.userWithKey({ credits: 4 });
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "priced", prompt: "a comet", stream: true, partial_images: 1 }),
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("image_generation.completed");
    expect(await server.balance(userId)).toBe(2);
    expect(await ledgerKinds(userId)).toEqual([["charge", -2]]);
  });

  test("an async task costs the price when accepted; an idempotent repeat is not charged again", async () => {
    const { key, userId } = await server.userWithKey({ credits: 6 });
    const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const accepted = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { ...headers, prefer: "respond-async" },
      body: JSON.stringify({ model: "priced", prompt: "a quiet harbour" }),
    });
    expect(accepted.status).toBe(202);
    expect(await server.balance(userId)).toBe(4);
    const { id } = (await accepted.json()) as { id: string };
    await until(async () => (await server.services.store.tasks.get(id))?.status === "succeeded", "the async task");

    const body = JSON.stringify({ model: "priced", prompt: "the same harbour" });
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { ...headers, "idempotency-key": "harbour-1" }, body });
      expect(res.status).toBe(200);
    }
    expect(await server.balance(userId)).toBe(2);
    expect(await ledgerKinds(userId)).toEqual([["charge", -2], ["charge", -2]]);
  });

  test("a balance below the price: 402 insufficient_credits naming price and balance, nothing charged", async () => {
    const { key, userId } = await server.userWithKey({ credits: 1 });
    const before = fake.received.length;
    const e = await client(key).images.generate({ model: "priced", prompt: "too dear" }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OpenAI.APIError);
    const err = e as InstanceType<typeof OpenAI.APIError>;
    expect(err.status).toBe(402);
    expect(err.code).toBe("insufficient_credits");
    expect(err.message).toContain("this model costs 2 credits per image and your balance is 1");
    expect(err.headers?.get("x-should-retry")).toBe("false");
    expect(fake.received.length).toBe(before);
    expect(await server.balance(userId)).toBe(1);
    // The cheaper model still works with the same balance.
    await client(key).images.generate({ model: "plain", prompt: "affordable" });
    expect(await server.balance(userId)).toBe(0);
  });
});

describe("the workbench words the configured prices", () => {
  /** A session cookie from the real sign-in form. */
  async function signIn(email: string, password: string): Promise<string> {
    const res = await fetch(`${server.url}/signin`, {
      method: "POST",
      redirect: "manual",
      headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ email, password }),
    });
    expect(res.status).toBe(303);
    return res.headers.get("set-cookie")!.split(";")[0]!;
  }

  test("sign-up names the range of image prices (0–3 here), in English and Chinese, and no longer '1 credit' each", async () => {
    const en = await (await fetch(`${server.url}/signup`)).text();
    expect(en).toContain("Images cost 0–3 credits depending on the model; chat is free.");
    expect(en).not.toContain("Each image costs 1 credit");
    const zh = await (await fetch(`${server.url}/signup`, { headers: { "accept-language": "zh-CN" } })).text();
    expect(zh).toContain("每张图片消耗 0–3 积分（视模型而定），聊天免费。");
  });

  test("the playground's model pickers show each image model's price", async () => {
    const password = "price picker horse";
    const { email } = await server.userWithKey({ credits: 5, password });
    const cookie = await signIn(email, password);
    const page = await (await fetch(`${server.url}/playground`, { headers: { cookie } })).text();
    const picker = (id: string) => [...page.matchAll(new RegExp(`<select id="${id}"[^>]*>(.*?)</select>`, "gs"))][0]![1]!;
    for (const id of ["gen-model", "edit-model"]) {
      const options = [...picker(id).matchAll(/<option value="([^"]+)"[^>]*>([^<]*)<\/option>/g)].map((m) => [m[1], m[2]]);
      expect(options).toEqual(
        expect.arrayContaining([
          ["builtin-image", "builtin-image · 3 credits"],
          ["priced", "priced · 2 credits"],
          ["free", "free · 0 credits"],
          ["plain", "plain · 1 credit"],
        ]),
      );
      expect(options.length).toBe(4);
      // Each option carries its submit words, which playground.js puts on the button when it is picked.
      const verb = id === "gen-model" ? "Generate" : "Edit";
      expect(picker(id)).toContain(`value="priced" data-submit-label="${verb} (2 credits)"`);
      expect(picker(id)).toContain(`value="plain" data-submit-label="${verb} (1 credit)"`);
    }
    // The buttons open with the selected model's price, not a fixed "1 credit".
    const selected = [...picker("gen-model").matchAll(/<option value="([^"]+)" selected/g)].map((m) => m[1]);
    expect(selected).toEqual(["builtin-image"]);
    expect(page).toContain(">Generate (3 credits)</button>");
    expect(page).toContain(">Edit (3 credits)</button>");
  });
});
