/**
 * Sign-in and redemption throttles shared through a real redis-server: counters (and SignIn
 * services) on separate connections with one key prefix play two instances. What both
 * implementations share (taking attempts atomically, giving them back, concurrent guesses) is in
 * attemptLimiter.test.ts; the in-memory variant is also covered with a fake clock in
 * test/workbench/workbench.test.ts and test/core/redemptionCodes.test.ts. Nothing asserts
 * timing; waits are bounded polls.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { redisAttemptCounters } from "../../src/core/redisAttemptLimiter";
import { RedisUnavailable } from "../../src/core/redisScript";
import { SignIn } from "../../src/core/signIn";
import { SetupToken } from "../../src/core/setupToken";
import { addUser } from "../../src/core/accounts";
import { apiErrorOf } from "../../src/http/errorMapping";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
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

function instances(commandTimeoutMs = 2_000) {
  const keyPrefix = `test:${++prefixes}:attempts:`;
  return { one: redisAttemptCounters(redis.client(), { keyPrefix, commandTimeoutMs }), two: redisAttemptCounters(redis.client(), { keyPrefix, commandTimeoutMs }), keyPrefix };
}

describe("RedisAttemptLimiter", () => {
  test("attempts taken by two instances add up; a reset in one clears it for both", async () => {
    const { one, two } = instances();
    const a = one("signin:account", 3, 60_000);
    const b = two("signin:account", 3, 60_000);
    expect(await a.take("ann@example.com")).toBe(0);
    expect(await b.take("ann@example.com")).toBe(0);
    expect(await a.take("ann@example.com")).toBe(0); // 3 of 3
    const wait = await b.take("ann@example.com");
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(60_000);
    expect(await b.take("bob@example.com")).toBe(0); // per key
    await b.reset("ann@example.com");
    expect(await a.take("ann@example.com")).toBe(0);
  });

  test("the window ends on its own (PEXPIRE), and kinds of attempts do not share counters", async () => {
    const { one } = instances();
    const short = one("redeem:user", 1, 300);
    expect(await short.take("user:1")).toBe(0);
    expect(await short.take("user:1")).toBeGreaterThan(0);
    expect(await one("redeem:address", 1, 300).take("user:1")).toBe(0);
    await until(async () => (await short.take("user:1")) === 0, "the window to end");
  });

  test("keys are hashed: no email or address is stored in Redis", async () => {
    const { one, keyPrefix } = instances();
    await one("signin:account", 5, 60_000).take("secret.person@example.com");
    await one("signin:address", 5, 60_000).take("203.0.113.9");
    const keys = (await redis.client().send("KEYS", [`${keyPrefix}*`])) as string[];
    expect(keys).toHaveLength(2);
    for (const k of keys) {
      expect(k).not.toContain("secret.person");
      expect(k).not.toContain("203.0.113.9");
    }
  });

  test("two SignIn services (two instances) throttle one account together", async () => {
    const { one, two } = instances();
    const store = createStore(openDatabase(":memory:"), latestVersion());
    await addUser(store, Date.now, { email: "ann@example.com", password: "correct horse battery", credits: 0, actor: "test" });
    const limits = { windowMs: 60_000, perAccount: 2, perAddress: 100, signUpsPerAddress: 100 };
    const rules = { minPasswordLength: 8, initialCredits: 0 };
    const a = new SignIn(store, rules, new SetupToken(), Date.now, limits, one);
    const b = new SignIn(store, rules, new SetupToken(), Date.now, limits, two);
    expect(await a.withPassword("ann@example.com", "wrong one", "10.0.0.1")).toMatchObject({ ok: false, reason: "invalid" });
    expect(await b.withPassword("ANN@example.com", "wrong two", "10.0.0.2")).toMatchObject({ ok: false, reason: "invalid" });
    // Even the right password is refused now, on either instance, from any address.
    expect(await a.withPassword("ann@example.com", "correct horse battery", "10.0.0.3")).toMatchObject({ ok: false, reason: "throttled" });
    expect(await b.withPassword("ann@example.com", "correct horse battery", "10.0.0.4")).toMatchObject({ ok: false, reason: "throttled" });
    await store.close();
  });

  test("Redis frozen: the check fails with RedisUnavailable within its bound (503), never hangs; answered again once Redis is back", async () => {
    const { one } = instances(300);
    const counter = one("signin:account", 1_000, 60_000); // room for takes that time out here and land later
    await counter.take("ann@example.com"); // connected
    redis.pause();
    try {
      const started = Date.now();
      const e = await counter.take("ann@example.com").catch((err: unknown) => err);
      expect(e).toBeInstanceOf(RedisUnavailable);
      expect(Date.now() - started).toBeLessThan(5_000); // bounded (300 ms; generous for a loaded machine)
      const api = apiErrorOf(e);
      expect(api?.status).toBe(503);
      expect(api?.errorCode).toBe("redis_unavailable");
    } finally {
      redis.resume();
    }
    await until(async () => (await counter.take("ann@example.com").catch(() => -1)) === 0, "answered again");
  });
});
