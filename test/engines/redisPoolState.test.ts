/**
 * Account pools sharing their state through a real redis-server: two AccountPools (or two
 * RedisPoolStates) on their own connections with the same key prefix play two instances of
 * one deployment. Nothing asserts timing; waits are bounded polls.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { AccountPool, AttemptFailure, type AttemptContext, type PoolSettings } from "../../src/engines/pool";
import { RedisPoolState, type RedisPoolStateOptions } from "../../src/engines/redisPoolState";
import { UpstreamUnavailable } from "../../src/core/engine";
import { apiErrorOf } from "../../src/http/errorMapping";
import type { PoolStateStore } from "../../src/core/store";
import { startRedis, type TestRedis } from "../support/redisServer";
import { until } from "../support/until";

let redis: TestRedis;
let prefixes = 0;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const SETTINGS: PoolSettings = {
  attemptTimeoutMs: 5_000,
  maxAttempts: 3,
  deadlineMs: 10_000,
  queueTimeoutMs: 8_000,
  rateLimitCooldownMaxMs: 8_000,
  failureThreshold: 2,
  failureCooldownMs: 1_000,
  failureCooldownMaxMs: 4_000,
};

/** No disabled flags, nothing stored: these tests are about the shared counts. */
const NO_STORE: PoolStateStore = {
  disabledAccounts: async () => new Map(),
  disableAccount: async () => {},
  saveSnapshot: async () => {},
};

function states(options: Partial<RedisPoolStateOptions> = {}) {
  const keyPrefix = `test:${++prefixes}:pool:up:`;
  const make = () => new RedisPoolState(redis.client(), { keyPrefix, pollMs: 20, renewMs: 100, leaseMs: 1_000, ...options });
  return { a: make(), b: make(), keyPrefix };
}

const ACCOUNTS = [
  { id: "a", weight: 1, maxConcurrency: 2 },
  { id: "b", weight: 1, maxConcurrency: 1 },
];

function pools(options: Partial<RedisPoolStateOptions> = {}, settings: Partial<PoolSettings> = {}) {
  const s = states(options);
  const make = (state: RedisPoolState) => new AccountPool("up", ACCOUNTS, { ...SETTINGS, ...settings }, NO_STORE, Date.now, undefined, undefined, state);
  return { one: make(s.a), two: make(s.b), ...s };
}

async function leases(keyPrefix: string, account: string): Promise<number> {
  return Number(await redis.client().send("ZCARD", [`${keyPrefix}${account}:leases`]));
}

describe("two instances sharing one Redis", () => {
  test("never exceed an account's capacity together; every request is served", async () => {
    const { one, two, keyPrefix } = pools();
    const running: Record<string, number> = { a: 0, b: 0 };
    const peak: Record<string, number> = { a: 0, b: 0 };
    const attempt = async (ctx: AttemptContext) => {
      running[ctx.account.id]!++;
      peak[ctx.account.id] = Math.max(peak[ctx.account.id]!, running[ctx.account.id]!);
      await Bun.sleep(15);
      running[ctx.account.id]!--;
      return ctx.account.id;
    };
    const results = await Promise.all(Array.from({ length: 24 }, (_, i) => (i % 2 === 0 ? one : two).run(attempt)));
    expect(results).toHaveLength(24);
    expect(peak.a).toBeLessThanOrEqual(2);
    expect(peak.b).toBeLessThanOrEqual(1);
    expect(peak.a! + peak.b!).toBe(3); // the capacity was used, across both instances
    // Every slot was given back.
    await until(async () => (await leases(keyPrefix, "a")) === 0 && (await leases(keyPrefix, "b")) === 0, "all leases released");
    await one.close();
    await two.close();
  });

  test("a 429 in one instance rests the account for the other too", async () => {
    const { one, two } = pools();
    const calls: string[] = [];
    const r = await one.run(async (ctx) => {
      calls.push(ctx.account.id);
      if (ctx.account.id === "a") throw new AttemptFailure("rate_limited", "slow down", 5_000, 429);
      return ctx.account.id;
    });
    expect(r.value).toBe("b");
    // The other instance never read a's rest itself: it learns it from Redis.
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) await two.run(async (ctx) => (seen.push(ctx.account.id), ctx.account.id));
    expect(seen).toEqual(["b", "b", "b"]);
    await two.refresh();
    expect(two.snapshot().find((s) => s.accountId === "a")).toMatchObject({ state: "cooling" });
    await one.close();
    await two.close();
  });

  test("consecutive failures in both instances add up, and one probe at a time runs across them", async () => {
    const { a, b } = states();
    // One failure seen by each instance reaches the threshold (2) together.
    expect((await a.failed("x", "failed")).count).toBe(1);
    expect((await b.failed("x", "failed")).count).toBe(2);
    // A rest long enough that the next take (two Redis round trips later, on a loaded machine) is still inside it.
    await a.coolDown("x", 1000, true, Date.now());
    expect(await b.take("x", 5)).toBeNull(); // resting
    // After the rest: capacity 1 for everyone until the probe's outcome decides.
    const probe = await until(async () => (await a.take("x", 5)) !== null, "the probe slot").then(() => true);
    expect(probe).toBe(true);
    expect(await b.take("x", 5)).toBeNull();
    expect(await a.take("x", 5)).toBeNull();
    await b.succeeded("x"); // the probe answered (wherever it ran): full capacity again
    const more = [await b.take("x", 5), await b.take("x", 5)];
    expect(more.every((l) => l !== null)).toBe(true);
    a.close();
    b.close();
  });

  test("a holder that stops renewing (crashed) frees its slot after the lease; a live holder keeps it", async () => {
    const { a, b, keyPrefix } = states({ leaseMs: 600, renewMs: 100 });
    const held = await a.take("x", 1);
    expect(held).not.toBeNull();
    // Well past the lease: the live holder renewed it, so the slot is still taken.
    await Bun.sleep(1_200);
    expect(await b.take("x", 1)).toBeNull();
    a.abandon(); // what a SIGKILLed instance looks like: no release, no renewal
    await until(async () => (await b.take("x", 1)) !== null, "the slot back after the lease");
    expect(await leases(keyPrefix, "x")).toBe(1); // b's, and only b's
    b.close();
  });
});

describe("Redis unavailable", () => {
  test("frozen: the request ends with UpstreamUnavailable (503) within the bound, never hangs; served again once Redis answers", async () => {
    const { one, two } = pools({ commandTimeoutMs: 300 });
    await one.run(async () => "warm"); // connected
    redis.pause();
    try {
      const started = Date.now();
      const e = await one.run(async () => "never").catch((err: unknown) => err);
      expect(e).toBeInstanceOf(UpstreamUnavailable);
      expect(Date.now() - started).toBeLessThan(5_000); // bounded (the bound is 300 ms; generous for a loaded machine)
      const api = apiErrorOf(e);
      expect(api?.status).toBe(503);
      expect(api?.errorCode).toBe("upstream_unavailable");
    } finally {
      redis.resume();
    }
    await until(async () => (await one.run(async () => "ok").then((r) => r.value, () => "failed")) === "ok", "served again");
    await one.close();
    await two.close();
  });

  test("restarted (empty): the client reconnects and requests are served again without a restart of ours", async () => {
    const { one, two } = pools({ commandTimeoutMs: 500 });
    expect((await one.run(async () => "ok")).value).toBe("ok");
    await redis.restart();
    await until(async () => (await one.run(async () => "ok").then((r) => r.value, () => "failed")) === "ok", "served after the restart");
    expect((await two.run(async () => "ok")).value).toBe("ok");
    await one.close();
    await two.close();
  });
});
