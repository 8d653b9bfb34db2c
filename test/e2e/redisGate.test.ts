/**
 * [redis] url end to end: two real servers share one real redis-server's gate; a slot held by
 * "another instance" refuses an image request with 429 before it is charged; Redis unreachable
 * answers 503 gate_unavailable (never charged) and /readyz says so.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Config } from "../../src/config";
import { RedisGate } from "../../src/core/redisGate";
import { startRedis, type TestRedis } from "../support/redisServer";
import { startTestServer, type TestServer } from "../support/server";

let redis: TestRedis;
let a: TestServer;
let b: TestServer;

const PREFIX = "e2e:";

beforeAll(async () => {
  redis = await startRedis();
  const config = (url: string) => (c: Config) => {
    c.redis.url = url;
    c.redis.key_prefix = PREFIX;
    c.limits.generation_concurrency = 1;
    c.limits.queue_size = 0;
  };
  a = await startTestServer({ config: config(redis.url) });
  // Both servers live in this one process: b's start migrates synchronously (busy_timeout), which
  // would wait on a transaction a still has open (its start expires old tasks in one, and a's
  // async transactions need this same thread to finish). So b starts once a has none open.
  await a.services.store.sql.transaction(async () => {});
  // The second instance shares the first one's database, as instances behind one load balancer do.
  b = await startTestServer({ config: (c) => (config(redis.url)(c), (c.server.data_dir = a.dataDir)) });
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await redis?.stop();
});

function generate(server: TestServer, key: string): Promise<Response> {
  return fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "builtin-image", prompt: "a lighthouse", size: "64x64", response_format: "b64_json" }),
  });
}

describe("[redis] url: the image gate shared by every instance", () => {
  test("both servers admit and charge while the shared slot is free", async () => {
    const user = await a.userWithKey({ credits: 5 });
    for (const server of [a, b]) {
      const res = await generate(server, user.key);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { data: { b64_json: string }[] };
      expect(body.data[0]!.b64_json.length).toBeGreaterThan(0);
    }
    expect(await a.balance(user.userId)).toBe(3);
    expect(await (await fetch(`${a.url}/readyz`)).json()).toEqual({ status: "ready" });
  });

  test("a slot held by another instance refuses the request with 429 before charging; freed, it runs", async () => {
    const user = await a.userWithKey({ credits: 5 });
    const other = new RedisGate(redis.client(), { subject: "image requests", global: 1, perUser: 2, queueSize: 0, queueTimeoutMs: 0 }, { keyPrefix: `${PREFIX}gate:image:` });
    const held = await other.admit(999_999);
    for (const server of [a, b]) {
      const res = await generate(server, user.key);
      expect(res.status).toBe(429);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("concurrency_limit_exceeded");
      expect(body.error.message).toContain("server-wide limit of 1");
      expect(res.headers.get("retry-after")).toBe("1");
    }
    expect(await a.balance(user.userId)).toBe(5);
    held.release();
    let res = await generate(b, user.key);
    // The release is sent without waiting; a request racing it may still see the slot taken.
    for (let i = 0; i < 50 && res.status === 429; i++) {
      await res.arrayBuffer();
      await Bun.sleep(20);
      res = await generate(b, user.key);
    }
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(await a.balance(user.userId)).toBe(4);
    other.close();
  });
});

describe("[redis] url: Redis unreachable", () => {
  test("an image request gets 503 gate_unavailable, uncharged, and /readyz answers 503", async () => {
    const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const deadPort = listener.port;
    listener.stop(true);
    const server = await startTestServer({ config: (c) => void (c.redis.url = `redis://127.0.0.1:${deadPort}`) });
    try {
      const user = await server.userWithKey({ credits: 3 });
      const res = await generate(server, user.key);
      expect(res.status).toBe(503);
      const body = (await res.json()) as { error: { code: string; type: string; message: string } };
      expect(body.error.code).toBe("gate_unavailable");
      expect(body.error.type).toBe("server_error");
      expect(body.error.message).not.toContain(String(deadPort));
      expect(res.headers.get("retry-after")).toBe("1");
      expect(await server.balance(user.userId)).toBe(3);
      const ready = await fetch(`${server.url}/readyz`);
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as { error: { code: string } }).error.code).toBe("not_ready");
    } finally {
      await server.close();
    }
  });
});
