/**
 * The charging flow against a real listening server with a controllable engine: 402 before
 * queueing, the gate's 429 (never charged), refunds exactly once on every kind of failure,
 * timeouts, generations that outlive a disconnected client, and the ledger invariant after a
 * concurrent burst of successes and failures.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { UpstreamFailed, UpstreamRateLimited } from "../../src/core/engine";
import { startTestServer, type TestServer } from "../support/server";
import { ControlledEngine, makePng } from "../support/images";
import { until } from "../support/until";

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
    customize: (s) => s.engines.registerBuiltinImage(engine),
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

const requestsOf = async (userId: number) => await server.services.store.requests.list({ userId, limit: 1000 });

async function expectLedgerInvariant(userId: number) {
  const { store } = server.services;
  expect(await store.credits.balance(userId)).toBe(await store.credits.ledgerSum(userId));
  for (const r of (await requestsOf(userId))) {
    expect(r.credits_charged).toBe(1);
    if (r.status === "succeeded") expect(r.credits_refunded).toBe(0);
    else {
      expect(["failed", "interrupted"]).toContain(r.status);
      expect(r.credits_refunded).toBe(1);
    }
    const rows = (await store.credits.ledger(userId, 10_000)).filter((l) => l.request_id === r.id);
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
    expect(await server.balance(u.userId)).toBe(2);
    const [row] = await requestsOf(u.userId);
    expect(row).toMatchObject({ status: "succeeded", endpoint: "/v1/images/generations", model: "builtin-image", credits_charged: 1, credits_refunded: 0, prompt: "a red fox" });
    expect(row!.generation_ms).not.toBeNull();
    await expectLedgerInvariant(u.userId);
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
    // It ends with where credits come from ([workbench] top_up_message, empty by default).
    expect(body.error.message).toEndWith(" Ask the administrator of this service for more credits.");
    expect(engine.calls.length).toBe(calls);
    expect(await requestsOf(u.userId)).toHaveLength(0);
    expect(await server.balance(u.userId)).toBe(0);
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
      expect(await server.balance(u.userId)).toBe(2);
      const [row] = await requestsOf(u.userId);
      expect(row).toMatchObject({ status: "failed", credits_charged: 1, credits_refunded: 1, error_code: code });
      await expectLedgerInvariant(u.userId);
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
    expect(await server.balance(u.userId)).toBe(3);
    await expectLedgerInvariant(u.userId);
  });
});

describe("upstream trace", () => {
  test("is recorded for a success and for a failure", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const trace = { upstreamId: "up-1", accountId: "acct-a", attempts: 2, upstreamLatencyMs: 120 };
    engine.behave = async (job) => ({ ...engine.png(job), trace });
    expect((await generate(u.key, { prompt: "traced ok" })).status).toBe(200);
    engine.behave = async () => {
      const e = new UpstreamFailed("all attempts failed");
      e.trace = { upstreamId: "up-1", accountId: "acct-b", attempts: 3 };
      throw e;
    };
    expect((await generate(u.key, { prompt: "traced failure" })).status).toBe(502);
    const rows = await requestsOf(u.userId);
    expect(rows.find((r) => r.prompt === "traced ok")).toMatchObject({ status: "succeeded", upstream_id: "up-1", account_id: "acct-a", attempts: 2, upstream_latency_ms: 120 });
    expect(rows.find((r) => r.prompt === "traced failure")).toMatchObject({ status: "failed", upstream_id: "up-1", account_id: "acct-b", attempts: 3, credits_refunded: 1 });
    expect(await server.balance(u.userId)).toBe(1);
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
    expect(await server.balance(u.userId)).toBe(10 - LIMIT);
    engine.releaseAll();
    for (const r of await Promise.all(running)) expect(r.status).toBe(200);
    expect(await server.balance(u.userId)).toBe(10 - LIMIT);
    expect(await requestsOf(u.userId)).toHaveLength(LIMIT);
    await expectLedgerInvariant(u.userId);
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
    expect(await server.balance(b.userId)).toBe(5);
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
      expect((await requestsOf(u.userId))[0]!.status).toBe("pending");
      engine.releaseAll();
      await server.services.background.idle();
      const [row] = await requestsOf(u.userId);
      expect(row!.status).toBe(outcome === "succeeds" ? "succeeded" : "failed");
      expect(await server.balance(u.userId)).toBe(outcome === "succeeds" ? 3 : 4);
      await expectLedgerInvariant(u.userId);
    });
  }
});

describe("with a queue and a short engine deadline", () => {
  let queued: TestServer;
  const slow = new ControlledEngine();

  beforeAll(async () => {
    queued = await startTestServer({
      config: (c) => {
        c.limits.generation_concurrency = 3;
        c.limits.per_user_concurrency = 2;
        c.limits.queue_size = 100;
        c.limits.queue_timeout_ms = 30_000;
        // Short, but long enough that generations held while a test queues a third request (a few
        // round trips, on the scaled pass through PostgreSQL and Redis) are not cut by it.
        c.limits.generation_timeout_ms = 2000;
        c.server.log_requests = false;
      },
      customize: (s) => s.engines.registerBuiltinImage(slow),
    });
  });

  afterAll(async () => {
    slow.releaseAll();
    await queued.close();
  });

  const send = (key: string, prompt: string) =>
    fetch(`${queued.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt, size: "64x64" }),
    });

  test("an engine that misses the deadline gets 504 and the credit back", async () => {
    slow.behave = (job) => new Promise((resolve) => job.signal.addEventListener("abort", () => resolve(slow.png(job))));
    const u = await queued.userWithKey({ credits: 1 });
    const res = await send(u.key, "never finishes");
    expect(res.status).toBe(504);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("timeout");
    expect(await queued.balance(u.userId)).toBe(1);
    expect((await queued.services.store.requests.list({ userId: u.userId }))[0]).toMatchObject({ status: "failed", error_code: "timeout", credits_refunded: 1 });
  });

  test("a queued request waits for a slot, reports the wait in x-queue-time-ms, and its generation time excludes it", async () => {
    slow.hold();
    const u = await queued.userWithKey({ credits: 3 });
    const first = [send(u.key, "one"), send(u.key, "two")];
    await until(() => slow.waiting === 2, "two running requests");
    const third = send(u.key, "three");
    await until(() => queued.services.gates.image.stats().queued === 1, "the third request to queue");
    await Bun.sleep(50);
    slow.releaseAll();
    await Promise.all(first);
    await until(() => slow.waiting === 1, "the third request to start");
    slow.releaseAll();
    const res = await third;
    expect(res.status).toBe(200);
    expect(Number(res.headers.get("x-queue-time-ms"))).toBeGreaterThanOrEqual(40);
    const row = (await queued.services.store.requests.list({ userId: u.userId })).find((r) => r.prompt === "three")!;
    expect(row.queue_ms).toBeGreaterThanOrEqual(40);
    expect(await queued.balance(u.userId)).toBe(0);
  });

  test("a client that gives up while queued leaves the queue and is never charged", async () => {
    slow.hold();
    const u = await queued.userWithKey({ credits: 5 });
    const first = [send(u.key, "one"), send(u.key, "two")];
    await until(() => slow.waiting === 2, "two running requests");
    const abort = new AbortController();
    const gaveUp = fetch(`${queued.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "impatient", size: "64x64" }),
      signal: abort.signal,
    }).catch((e: Error) => e);
    await until(() => queued.services.gates.image.stats().queued === 1, "the request to queue");
    abort.abort();
    await gaveUp;
    await until(() => queued.services.gates.image.stats().queued === 0, "the queue to drop the request");
    slow.releaseAll();
    await Promise.all(first);
    expect(await queued.balance(u.userId)).toBe(3);
    expect((await queued.services.store.requests.list({ userId: u.userId })).map((r) => r.prompt).sort()).toEqual(["one", "two"]);
  });

  test("after a concurrent burst of mixed successes and failures, every balance equals its ledger sum", async () => {
    slow.behave = async (job) => {
      await Bun.sleep(job.prompt.length % 7);
      if (job.prompt.includes("fail")) throw new UpstreamFailed("injected failure");
      if (job.prompt.includes("garbage")) return { bytes: new Uint8Array([1, 2, 3]), mime: "image/png", width: 64, height: 64 };
      if (job.prompt.includes("throw")) throw new Error("engine bug");
      return slow.png(job);
    };
    const users = await Promise.all([queued.userWithKey({ credits: 6 }), queued.userWithKey({ credits: 20 }), queued.userWithKey({ credits: 0 })]);
    const kinds = ["ok", "fail", "ok", "garbage", "throw"];
    const sent: { user: number; kind: string }[] = [];
    const all: Promise<Response>[] = [];
    for (let i = 0; i < 36; i++) {
      const user = i % users.length;
      const kind = kinds[i % kinds.length]!;
      sent.push({ user, kind });
      all.push(send(users[user]!.key, `${kind} request ${i}`));
    }
    const statuses = (await Promise.all(all)).map((r) => r.status);
    await queued.services.background.idle();
    const { store } = queued.services;
    for (const [i, u] of users.entries()) {
      expect(await store.credits.balance(u.userId)).toBe(await store.credits.ledgerSum(u.userId));
      const rows = await store.requests.list({ userId: u.userId, limit: 1000 });
      const ledger = await store.credits.ledger(u.userId, 10_000);
      for (const r of rows) {
        const charges = ledger.filter((l) => l.request_id === r.id && l.kind === "charge");
        const refunds = ledger.filter((l) => l.request_id === r.id && l.kind === "refund");
        expect(charges).toHaveLength(1);
        expect(refunds).toHaveLength(r.status === "succeeded" ? 0 : 1);
        expect(r.status === "succeeded" || r.credits_refunded === 1).toBe(true);
      }
      const successes = statuses.filter((s, j) => sent[j]!.user === i && s === 200).length;
      expect(successes).toBe(rows.filter((r) => r.status === "succeeded").length);
      expect(await store.credits.balance(u.userId)).toBe([6, 20, 0][i]! - successes);
    }
    // The broke user got only 402s; something succeeded and something failed.
    expect(statuses.filter((s, j) => sent[j]!.user === 2).every((s) => s === 402)).toBe(true);
    expect(statuses).toContain(200);
    expect(statuses).toContain(502);
    expect(statuses).toContain(500);
  });
});

test("a graceful stop waits for a running generation, which finishes and is answered", async () => {
  const held = new ControlledEngine();
  held.hold();
  const s = await startTestServer({ config: (c) => void (c.server.log_requests = false), customize: (x) => x.engines.registerBuiltinImage(held) });
  const u = await s.userWithKey({ credits: 1 });
  const res = fetch(`${s.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "finish me", size: "64x64" }),
  });
  await until(() => held.waiting === 1, "the generation to start");
  let stopped = false;
  const stopping = s.close().then(() => (stopped = true));
  await Bun.sleep(30);
  expect(stopped).toBe(false);
  expect(s.services.background.size).toBe(1);
  held.releaseAll();
  expect((await res).status).toBe(200);
  await stopping;
});
