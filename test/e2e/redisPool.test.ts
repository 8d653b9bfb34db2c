/**
 * [redis] url end to end for the upstream pool: two real servers (one database, one real
 * redis-server) in front of one fake OpenAI-compatible upstream whose only account takes 2
 * requests at a time. Requests spread over both servers never exceed it together; Redis lost in
 * the middle of a charged request ends it with 503, refunded; Redis back, requests are served
 * again without restarting anything. Nothing asserts timing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Config } from "../../src/config";
import { startFakeOpenAI, type FakeOpenAI } from "../support/fakeUpstreams";
import { startRedis, type TestRedis } from "../support/redisServer";
import { startTestServer, type TestServer } from "../support/server";

const KEY = "sk-shared-account-0001";
const SLOW_KEY = "sk-slow-account-0002";

let redis: TestRedis;
let fake: FakeOpenAI;
let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  redis = await startRedis();
  fake = startFakeOpenAI();
  const toml = `
[limits]
generation_concurrency = 16
per_user_concurrency = 16
queue_size = 64
queue_timeout_ms = 20000
generation_timeout_ms = 30000

[[upstreams]]
id = "oa"
kind = "openai"
base_url = "${fake.url}/v1"
timeout_ms = 10000
accounts = [ { id = "only", api_key = "${KEY}", max_concurrency = 2 } ]

[[upstreams]]
id = "slow"
kind = "openai"
base_url = "${fake.url}/v1"
timeout_ms = 800
max_attempts = 3
accounts = [ { id = "s", api_key = "${SLOW_KEY}", max_concurrency = 4 } ]

[[models]]
id = "pic"
kind = "image"
upstream = "oa"

[[models]]
id = "slow-pic"
kind = "image"
upstream = "slow"
`;
  const shared = (c: Config) => {
    c.redis.url = redis.url;
    c.redis.key_prefix = "e2e-pool:";
  };
  a = await startTestServer({ toml, config: shared });
  // Both servers live in this one process: b's start migrates synchronously (busy_timeout), which
  // would wait on a transaction a still has open (a's async transactions need this same thread to
  // finish). So b starts once a has none open; separate processes never meet this.
  await a.services.store.sql.transaction(async () => {});
  // The second instance shares the first one's database, as instances behind one load balancer do.
  b = await startTestServer({ toml, config: (c) => (shared(c), (c.server.data_dir = a.dataDir)) });
}, 60_000);

afterAll(async () => {
  await a?.close();
  await b?.close();
  await fake?.stop();
  await redis?.stop();
});

function generate(server: TestServer, key: string, model = "pic"): Promise<Response> {
  return fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, prompt: "a lighthouse", size: "64x64", response_format: "b64_json" }),
  });
}

describe("[redis] url: one upstream account shared by two instances", () => {
  test("requests spread over both servers never exceed the account's max_concurrency together; all are served and charged once", async () => {
    fake.setLatency(60);
    try {
      const user = await a.userWithKey({ credits: 20 });
      const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => generate(i % 2 === 0 ? a : b, user.key)));
      const statuses = await Promise.all(answers.map(async (r) => (await r.arrayBuffer(), r.status)));
      expect(statuses).toEqual(Array(12).fill(200));
      expect(fake.maxConcurrent.get(KEY)).toBe(2); // used to the full, never beyond, across both
      expect(await a.balance(user.userId)).toBe(8);
    } finally {
      fake.setLatency(0);
    }
  }, 60_000);

  test("Redis lost during a charged request: 503 upstream_unavailable and the credit back; Redis back: served again", async () => {
    const user = await a.userWithKey({ credits: 3 });
    fake.queueFaults(SLOW_KEY, { kind: "hang" });
    const before = fake.received.filter((r) => r.account === SLOW_KEY).length;
    const pending = generate(a, user.key, "slow-pic");
    // Once the upstream has the request (admitted, charged, a slot taken), Redis stops answering.
    for (let i = 0; i < 500 && fake.received.filter((r) => r.account === SLOW_KEY).length === before; i++) await Bun.sleep(10);
    redis.pause();
    let res: Response;
    try {
      res = await pending;
    } finally {
      redis.resume();
    }
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; type: string } };
    expect(body.error).toMatchObject({ code: "upstream_unavailable", type: "upstream_error" });
    expect(await a.balance(user.userId)).toBe(3); // charged, then refunded
    const history = (await a.services.store.requests.list({ userId: user.userId, limit: 1 }))[0]!;
    expect(history).toMatchObject({ status: "failed", credits_charged: 1, credits_refunded: 1 });
    // Back without a restart: the connection comes back by itself.
    let again = await generate(b, user.key, "slow-pic");
    for (let i = 0; i < 50 && again.status !== 200; i++) {
      await again.arrayBuffer();
      await Bun.sleep(100);
      again = await generate(b, user.key, "slow-pic");
    }
    expect(again.status).toBe(200);
    await again.arrayBuffer();
    expect(await a.balance(user.userId)).toBe(2);
  }, 60_000);
});
