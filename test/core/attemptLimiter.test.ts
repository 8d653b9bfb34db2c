/**
 * Taking an attempt is one step that counts it and says whether it is allowed, on both
 * implementations: this process's memory, and Redis (a real redis-server; two connections on
 * one key prefix play two instances). A check made before anything is counted let every one of
 * 40 concurrent guesses through a limit of 5; taken atomically, exactly the limit gets through,
 * to the password check (SignIn) or to the store (RedemptionCodes), and the rest are refused.
 * Redis-only behaviour (hashed keys, the window's PEXPIRE, a frozen Redis) is in
 * redisAttemptLimiter.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { AttemptLimiter, memoryAttemptCounters, type AttemptCounter, type AttemptCounters } from "../../src/core/attemptLimiter";
import { redisAttemptCounters } from "../../src/core/redisAttemptLimiter";
import { SignIn } from "../../src/core/signIn";
import { SetupToken } from "../../src/core/setupToken";
import { addUser as addAccount } from "../../src/core/accounts";
import { RedemptionCodes, generateCode } from "../../src/core/redemptionCodes";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { addUser, memoryStore } from "../support/memoryStore";
import { startRedis, type TestRedis } from "../support/redisServer";

let redis: TestRedis;
let prefixes = 0;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

/** Two instances' counters over one shared state: one process's memory, or one Redis prefix on two connections. */
const kinds: [string, () => [AttemptCounters, AttemptCounters]][] = [
  [
    "in memory",
    () => {
      // One process: each kind of attempt is one counter, however many services ask for it.
      const made = new Map<string, AttemptCounter>();
      const make = memoryAttemptCounters(Date.now);
      const counters: AttemptCounters = (name, max, windowMs) => made.get(name) ?? made.set(name, make(name, max, windowMs)).get(name)!;
      return [counters, counters];
    },
  ],
  [
    "in Redis",
    () => {
      const keyPrefix = `test:${++prefixes}:attempts:`;
      return [redisAttemptCounters(redis.client(), { keyPrefix }), redisAttemptCounters(redis.client(), { keyPrefix })];
    },
  ],
];

const WINDOW_MS = 60_000;
const PASSWORD = "correct horse battery";

function tally<T extends { ok: boolean; reason?: string }>(results: T[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of results) {
    const key = r.ok ? "ok" : r.reason!;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

describe.each(kinds)("attempts counted %s", (_, instances) => {
  test("take counts up to the limit, then refuses with the time left and counts nothing; giveBack returns one; per key; reset clears", async () => {
    const [one, two] = instances();
    const a = one("signin:account", 2, WINDOW_MS);
    const b = two("signin:account", 2, WINDOW_MS);
    expect(await a.take("ann")).toBe(0);
    expect(await b.take("ann")).toBe(0);
    const wait = await a.take("ann");
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(WINDOW_MS);
    expect(await b.take("ann")).toBeGreaterThan(0);
    expect(await a.take("bob")).toBe(0); // per key
    expect(await one("redeem:user", 2, WINDOW_MS).take("ann")).toBe(0); // per kind
    // The two refusals were not counted: one given back frees exactly one.
    await b.giveBack("ann");
    expect(await a.take("ann")).toBe(0);
    expect(await b.take("ann")).toBeGreaterThan(0);
    await a.reset("ann");
    expect(await b.take("ann")).toBe(0);
  });

  test("giving back what was never taken banks nothing", async () => {
    const [one] = instances();
    const c = one("signin:account", 2, WINDOW_MS);
    await c.giveBack("ann");
    await c.giveBack("ann");
    expect([await c.take("ann"), await c.take("ann")]).toEqual([0, 0]);
    expect(await c.take("ann")).toBeGreaterThan(0);
  });

  test("40 takes at once, half through each instance, against a limit of 5: exactly 5 allowed", async () => {
    const [one, two] = instances();
    const a = one("signin:account", 5, WINDOW_MS);
    const b = two("signin:account", 5, WINDOW_MS);
    const waits = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).take("ann")));
    expect(waits.filter((w) => w === 0)).toHaveLength(5);
    for (const w of waits.filter((w) => w !== 0)) expect(w).toBeLessThanOrEqual(WINDOW_MS);
  });

  test("SignIn: 40 wrong passwords at once (5 per account): 5 reach the password check, 35 are throttled, then the right one too; an unknown email alike", async () => {
    const [one, two] = instances();
    const store = createStore(openDatabase(":memory:"), latestVersion());
    await addAccount(store, Date.now, { email: "ann@example.com", password: PASSWORD, credits: 0, actor: "test" });
    const limits = { windowMs: WINDOW_MS, perAccount: 5, perAddress: 1000, signUpsPerAddress: 100 };
    const rules = { minPasswordLength: 8, initialCredits: 0 };
    const a = new SignIn(store, rules, new SetupToken(), Date.now, limits, one);
    const b = new SignIn(store, rules, new SetupToken(), Date.now, limits, two);
    for (const email of ["ann@example.com", "ghost@example.com"]) {
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).withPassword(email, `guess-${i}`, `10.0.0.${i}`)));
      expect(tally(results)).toEqual({ invalid: 5, throttled: 35 });
      expect(await a.withPassword(email, PASSWORD, "10.9.9.9")).toMatchObject({ ok: false, reason: "throttled" });
    }
    await store.close();
  }, 60_000);

  test("SignIn: an attempt one counter refuses is not counted by the other; a success resets the account's count", async () => {
    const [counters] = instances();
    const store = createStore(openDatabase(":memory:"), latestVersion());
    await addAccount(store, Date.now, { email: "ann@example.com", password: PASSWORD, credits: 0, actor: "test" });
    const signIn = new SignIn(store, { minPasswordLength: 8, initialCredits: 0 }, new SetupToken(), Date.now, { windowMs: WINDOW_MS, perAccount: 2, perAddress: 1, signUpsPerAddress: 100 }, counters);
    expect(await signIn.withPassword("ann@example.com", "wrong", "10.0.0.1")).toEqual({ ok: false, reason: "invalid" });
    // The address is spent: refused, and the account's count given back...
    expect(await signIn.withPassword("ann@example.com", "wrong", "10.0.0.1")).toMatchObject({ ok: false, reason: "throttled" });
    // ...so the account's second attempt is left, from another address.
    expect((await signIn.withPassword("ann@example.com", PASSWORD, "10.0.0.2")).ok).toBe(true);
    // The success reset the account: two wrong attempts more, then a refusal.
    expect(await signIn.withPassword("ann@example.com", "wrong", "10.0.0.3")).toEqual({ ok: false, reason: "invalid" });
    expect(await signIn.withPassword("ann@example.com", "wrong", "10.0.0.4")).toEqual({ ok: false, reason: "invalid" });
    expect(await signIn.withPassword("ann@example.com", PASSWORD, "10.0.0.5")).toMatchObject({ ok: false, reason: "throttled" });
    await store.close();
  }, 60_000);

  test("SignIn.signUp: 10 at once from one address (2 allowed): 2 accounts made; forms refused for their own problems do not count", async () => {
    const [counters] = instances();
    const store = createStore(openDatabase(":memory:"), latestVersion());
    const signIn = new SignIn(store, { minPasswordLength: 8, initialCredits: 0 }, new SetupToken(), Date.now, { windowMs: WINDOW_MS, perAccount: 5, perAddress: 5, signUpsPerAddress: 2 }, counters);
    for (let i = 0; i < 3; i++) {
      expect(await signIn.signUp("not an email", PASSWORD, "10.0.0.1")).toMatchObject({ ok: false, reason: "invalid", problem: "email_invalid" });
      expect(await signIn.signUp(`short${i}@example.com`, "short", "10.0.0.1")).toMatchObject({ ok: false, reason: "invalid", problem: "password_too_short" });
    }
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => signIn.signUp(`new${i}@example.com`, PASSWORD, "10.0.0.1")));
    expect(tally(results)).toEqual({ ok: 2, throttled: 8 });
    expect((await signIn.signUp("other@example.com", PASSWORD, "10.0.0.2")).ok).toBe(true);
    await store.close();
  }, 60_000);

  test("SignIn.setUpFirstAdmin: 10 wrong tokens at once (2 allowed): 2 tried, 8 throttled; a weak password or the right token does not count", async () => {
    const [counters] = instances();
    const store = createStore(openDatabase(":memory:"), latestVersion());
    const setup = new SetupToken();
    const token = setup.issue();
    const signIn = new SignIn(store, { minPasswordLength: 8, initialCredits: 0 }, setup, Date.now, { windowMs: WINDOW_MS, perAccount: 5, perAddress: 5, signUpsPerAddress: 2 }, counters);
    expect(await signIn.setUpFirstAdmin("nope", "root@example.com", "short", "10.0.0.1")).toMatchObject({ ok: false, reason: "invalid" });
    // The right token with an email the account refuses: the token stays valid, and the attempt is not counted.
    expect(await signIn.setUpFirstAdmin(token, "not an email", PASSWORD, "10.0.0.1")).toMatchObject({ ok: false, reason: "invalid", problem: "email_invalid" });
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => signIn.setUpFirstAdmin(`guess-${i}`, "root@example.com", PASSWORD, "10.0.0.1")));
    expect(tally(results)).toEqual({ wrong_token: 2, throttled: 8 });
    expect(await signIn.setUpFirstAdmin(token, "root@example.com", PASSWORD, "10.0.0.1")).toMatchObject({ ok: false, reason: "throttled" });
    expect((await signIn.setUpFirstAdmin(token, "root@example.com", PASSWORD, "10.0.0.2")).ok).toBe(true);
    await store.close();
  }, 60_000);

  test("RedemptionCodes: 40 wrong codes at once (10 per user): 10 reach the store, 30 are throttled, then a good code too", async () => {
    const [one, two] = instances();
    const store = memoryStore();
    const limits = { windowMs: WINDOW_MS, perUser: 10, perAddress: 1000 };
    const a = new RedemptionCodes(store.redemptions, Date.now, limits, one);
    const b = new RedemptionCodes(store.redemptions, Date.now, limits, two);
    const user = addUser(store, 0);
    const { codes: [good] } = await a.createBatch({ name: "x", credits: 5, count: 1, expiresInDays: null, createdBy: "cli" });
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).redeem(user, generateCode(), `10.0.0.${i}`)));
    expect(tally(results)).toEqual({ unknown: 10, throttled: 30 });
    expect(await a.redeem(user, good!, "10.9.9.9")).toMatchObject({ ok: false, reason: "throttled" });
    expect(await store.credits.balance(user)).toBe(0);
  });

  test("RedemptionCodes: only failures count (a success gives its attempt back), per user and per address", async () => {
    const [counters] = instances();
    const store = memoryStore();
    const codes = new RedemptionCodes(store.redemptions, Date.now, { windowMs: WINDOW_MS, perUser: 3, perAddress: 4 }, counters);
    const [user, other] = [addUser(store, 0), addUser(store, 0)];
    const { codes: good } = await codes.createBatch({ name: "x", credits: 1, count: 6, expiresInDays: null, createdBy: "cli" });
    for (const code of good.slice(0, 5)) expect((await codes.redeem(user, code, "1.1.1.1")).ok).toBe(true);
    for (let i = 0; i < 3; i++) expect(await codes.redeem(user, "bad", "1.1.1.1")).toEqual({ ok: false, reason: "malformed" });
    expect(await codes.redeem(user, good[5]!, "1.1.1.1")).toMatchObject({ ok: false, reason: "throttled" });
    // The address has one failure left; the user's refusal above did not take it.
    expect(await codes.redeem(other, "bad", "1.1.1.1")).toEqual({ ok: false, reason: "malformed" });
    expect(await codes.redeem(other, good[5]!, "1.1.1.1")).toMatchObject({ ok: false, reason: "throttled" });
    expect(await codes.redeem(other, good[5]!, "2.2.2.2")).toMatchObject({ ok: true, credits: 1 });
    expect(await store.credits.balance(user)).toBe(5);
  });
});

describe("the in-memory limiter's sweep of keys whose window has passed", () => {
  // Work is counted, not timed: each key the limiter looks at reads the clock once.
  test("many live keys (addresses are cheap to vary): each attempt does a bounded share of the sweeping", async () => {
    let reads = 0;
    let now = 1_000_000;
    const limiter = new AttemptLimiter(5, WINDOW_MS, () => (reads++, now));
    const takes = 12_000;
    for (let i = 0; i < takes; i++) expect(await limiter.take(`2001:db8::${i.toString(16)}`)).toBe(0);
    // Swept on every attempt past 10 000 keys, this was some 22 million reads.
    expect(reads).toBeLessThan(10 * takes);
    expect(limiter.size).toBe(takes);
    // Keys whose window has passed are still swept away.
    now += WINDOW_MS + 1;
    for (let i = 0; i < 2 * takes; i++) await limiter.take(`2001:db8:1::${i.toString(16)}`);
    expect(limiter.size).toBe(2 * takes);
    expect(reads).toBeLessThan(10 * 3 * takes);
  });
});
