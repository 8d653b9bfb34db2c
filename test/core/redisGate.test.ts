/**
 * The Redis gate against a real redis-server: two RedisGate instances on their own connections
 * play two processes sharing one gate. Nothing here asserts timing; waits are bounded polls.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { RedisClient } from "bun";
import { GateRejected, type GateLimits, type Permit } from "../../src/core/gate";
import { GateUnavailable, RedisGate, type RedisGateOptions } from "../../src/core/redisGate";
import { apiErrorOf } from "../../src/http/errorMapping";
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

const LIMITS: GateLimits = { subject: "image requests", global: 2, perUser: 1, queueSize: 4, queueTimeoutMs: 10_000 };

/** Two instances of one gate (same key prefix, separate connections). */
function pair(limits: Partial<GateLimits> = {}, options: Partial<RedisGateOptions> = {}) {
  const keyPrefix = `test:${++prefixes}:`;
  const make = () => new RedisGate(redis.client(), { ...LIMITS, ...limits }, { keyPrefix, pollMs: 20, renewMs: 100, leaseMs: 1_500, ...options });
  return { a: make(), b: make(), keyPrefix };
}

function track(p: Promise<Permit>) {
  const t = { permit: undefined as Permit | undefined, error: undefined as Error | undefined };
  p.then(
    (permit) => (t.permit = permit),
    (e: Error) => (t.error = e),
  );
  return t;
}

async function queued(keyPrefix: string): Promise<number> {
  return Number(await redis.client().send("ZCARD", [`${keyPrefix}queue`]));
}

async function running(keyPrefix: string): Promise<number> {
  return Number(await redis.client().send("ZCARD", [`${keyPrefix}slots`]));
}

async function rejection(p: Promise<Permit>): Promise<GateRejected> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!(e instanceof GateRejected)) throw new Error(`expected a GateRejected, got ${String(e)}`);
  return e;
}

describe("RedisGate: two instances share one gate", () => {
  test("never more than the global limit in flight across both; every request runs", async () => {
    const { a, b } = pair({ global: 3, perUser: 3, queueSize: 20 });
    let inFlight = 0;
    let most = 0;
    let done = 0;
    const work = async (gate: RedisGate, user: number) => {
      const permit = await gate.admit(user);
      inFlight++;
      most = Math.max(most, inFlight);
      await Bun.sleep(15);
      inFlight--;
      done++;
      permit.release();
    };
    await Promise.all(Array.from({ length: 14 }, (_, i) => work(i % 2 ? a : b, i % 5)));
    expect(most).toBeLessThanOrEqual(3);
    expect(most).toBeGreaterThan(1);
    expect(done).toBe(14);
    a.close();
    b.close();
  });

  test("the per-user limit holds across both; another user is not held up", async () => {
    const { a, b, keyPrefix } = pair({ global: 3, perUser: 1 });
    const first = await a.admit(1);
    const second = track(b.admit(1));
    await until(async () => (await queued(keyPrefix)) === 1, "user 1's second request queued");
    const other = await b.admit(2); // user 2 runs at once, past user 1's waiter
    expect(second.permit).toBeUndefined();
    first.release();
    await until(() => second.permit !== undefined, "user 1's second request admitted");
    expect(await running(keyPrefix)).toBe(2);
    second.permit!.release();
    other.release();
    await until(async () => (await running(keyPrefix)) === 0, "all slots back");
    a.close();
    b.close();
  });

  test("waiters are admitted in arrival order across instances", async () => {
    const { a, b, keyPrefix } = pair({ global: 1, perUser: 5 });
    const holder = await a.admit(1);
    const order: number[] = [];
    const waits: Promise<void>[] = [];
    for (const [i, gate] of [b, a, b, a].entries()) {
      waits.push(gate.admit(10 + i).then((p) => void (order.push(i), p.release())));
      await until(async () => (await queued(keyPrefix)) === i + 1, `waiter ${i} queued`);
    }
    holder.release();
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3]);
    a.close();
    b.close();
  });

  test("a full queue refuses at once with queue_full", async () => {
    const { a, b, keyPrefix } = pair({ global: 1, perUser: 1, queueSize: 1 });
    const holder = await a.admit(1);
    const waiter = track(b.admit(2));
    await until(async () => (await queued(keyPrefix)) === 1, "one waiter queued");
    const e = await rejection(a.admit(3));
    expect(e.reason).toBe("queue_full");
    expect(e.limit).toBe("global");
    expect(e.retryAfterMs).toBe(1000);
    holder.release();
    await until(() => waiter.permit !== undefined, "the waiter admitted");
    waiter.permit!.release();
    a.close();
    b.close();
  });

  test("a waiter past the queue timeout gets queue_timeout and leaves the queue", async () => {
    const { a, b, keyPrefix } = pair({ global: 1, queueTimeoutMs: 300 });
    const holder = await a.admit(1);
    const e = await rejection(b.admit(2));
    expect(e.reason).toBe("queue_timeout");
    expect(await queued(keyPrefix)).toBe(0);
    holder.release();
    await until(async () => (await running(keyPrefix)) === 0, "the slot back");
    a.close();
    b.close();
  });

  test("an aborted waiter gets aborted, leaves the queue and takes no slot", async () => {
    const { a, b, keyPrefix } = pair({ global: 1, queueSize: 1 });
    const holder = await a.admit(1);
    const client = new AbortController();
    const waiting = b.admit(2, client.signal);
    await until(async () => (await queued(keyPrefix)) === 1, "the waiter queued");
    client.abort();
    expect((await rejection(waiting)).reason).toBe("aborted");
    await until(async () => (await queued(keyPrefix)) === 0, "the queue empty");
    holder.release();
    await until(async () => (await running(keyPrefix)) === 0, "the slot back");
    const next = await b.admit(3);
    expect(await running(keyPrefix)).toBe(1);
    next.release();
    a.close();
    b.close();
  });

  test("closing an instance answers its waiters GateUnavailable; the other instance's waiter is admitted", async () => {
    const { a, b, keyPrefix } = pair({ global: 1, perUser: 1, queueSize: 4 });
    const holder = await a.admit(1);
    const onB = track(b.admit(2));
    await until(async () => (await queued(keyPrefix)) === 1, "b's waiter queued");
    const onA = track(a.admit(3));
    await until(async () => (await queued(keyPrefix)) === 2, "a's waiter queued");
    b.close();
    await until(() => onB.error !== undefined, "b's waiter answered");
    expect(onB.error).toBeInstanceOf(GateUnavailable);
    holder.release();
    await until(() => onA.permit !== undefined, "a's waiter admitted");
    onA.permit!.release();
    a.close();
  });

  test("a holder that stops renewing (crashed) frees its slot after the lease; a live holder keeps it", async () => {
    const { a, b } = pair({ global: 1, queueTimeoutMs: 15_000 }, { leaseMs: 1_000 });
    const live = await a.admit(1);
    // The live holder renews: a waiter whose timeout is well past the lease still times out.
    const shortWait = pair({ global: 1, queueTimeoutMs: 2_500 }, { leaseMs: 1_000 });
    const liveHolder = await shortWait.a.admit(1);
    expect((await rejection(shortWait.b.admit(2))).reason).toBe("queue_timeout");
    liveHolder.release();
    // The crashed holder: its permit is never released, its lease lapses.
    a.stopRenewing();
    const waiter = await b.admit(2);
    expect(waiter.waitedMs).toBeGreaterThan(0);
    waiter.release();
    live.release(); // too late to matter, and harmless
    for (const g of [a, b, shortWait.a, shortWait.b]) g.close();
  });

  test("release is idempotent: a second release frees nothing more", async () => {
    const { a, b, keyPrefix } = pair({ global: 2, perUser: 2, queueSize: 0 });
    const p1 = await a.admit(1);
    const p2 = await a.admit(1);
    p1.release();
    p1.release();
    await until(async () => (await running(keyPrefix)) === 1, "one slot back");
    const p3 = await b.admit(2);
    const e = await rejection(b.admit(3));
    expect(e.reason).toBe("queue_full");
    expect(await running(keyPrefix)).toBe(2);
    p2.release();
    p3.release();
    a.close();
    b.close();
  });
});

describe("RedisGate: Redis unreachable", () => {
  test("admission fails with GateUnavailable within its bound, answered as 503 gate_unavailable", async () => {
    // A port nothing listens on (the test redis's port + 1 may be taken; a closed listener's is not).
    const srv = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = srv.port;
    srv.stop(true);
    const client = new RedisClient(`redis://127.0.0.1:${port}`, { connectionTimeout: 300, autoReconnect: false, enableOfflineQueue: false });
    const gate = new RedisGate(client, LIMITS, { keyPrefix: "unreachable:", commandTimeoutMs: 1_000 });
    const e = await gate.admit(1).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(GateUnavailable);
    const api = apiErrorOf(e);
    expect(api?.status).toBe(503);
    expect(api?.errorCode).toBe("gate_unavailable");
    gate.close();
  });
});
