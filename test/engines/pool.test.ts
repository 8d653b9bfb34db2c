/**
 * The account pool on its own: attempts are plain callbacks, time is a fake clock, the store
 * is the real SQLite one in memory. HTTP behaviour is covered in openai/sdwebui tests.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AccountPool, AttemptFailure, MAX_RETRY_AFTER_MS, type AttemptContext, type PoolSettings } from "../../src/engines/pool";
import { EngineTimeout, UpstreamFailed, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable, type UpstreamTrace } from "../../src/core/engine";
import { createStore } from "../../src/store";
import { CancelScope } from "../../src/core/cancelScope";
import { latestVersion, openDatabase } from "../../src/store/database";

const SETTINGS: PoolSettings = {
  attemptTimeoutMs: 1000,
  maxAttempts: 3,
  deadlineMs: 5000,
  queueTimeoutMs: 2000,
  rateLimitCooldownMaxMs: 8000,
  failureThreshold: 2,
  failureCooldownMs: 1000,
  failureCooldownMaxMs: 4000,
};

function setup(accounts = [{ id: "a", weight: 2, maxConcurrency: 2 }, { id: "b", weight: 1, maxConcurrency: 1 }], settings: Partial<PoolSettings> = {}, dataDir = ":memory:") {
  let now = 1_000_000;
  const store = createStore(openDatabase(dataDir), latestVersion());
  const logs: string[] = [];
  const logger = { warn: (msg: string, f?: Record<string, unknown>) => logs.push(JSON.stringify({ msg, ...f })), info: (msg: string, f?: Record<string, unknown>) => logs.push(JSON.stringify({ msg, ...f })) };
  const pool = new AccountPool("up", accounts, { ...SETTINGS, ...settings }, store.upstreams, () => now, logger);
  return {
    pool,
    store,
    logs,
    advance: (ms: number) => (now += ms),
    now: () => now,
  };
}

/** An attempt that answers per account from a script of outcomes (default: success). */
function scripted(script: Record<string, (AttemptFailure | "ok")[]>) {
  const calls: string[] = [];
  const attempt = async (ctx: AttemptContext) => {
    calls.push(ctx.account.id);
    const next = script[ctx.account.id]?.shift() ?? "ok";
    if (next !== "ok") throw next;
    return ctx.account.id;
  };
  return { calls, attempt };
}

describe("account choice", () => {
  test("sequential requests spread by weight (2:1)", async () => {
    const { pool } = setup();
    const served: string[] = [];
    for (let i = 0; i < 9; i++) served.push((await pool.run(async (ctx) => ctx.account.id)).value);
    expect(served.filter((s) => s === "a").length).toBe(6);
    expect(served.filter((s) => s === "b").length).toBe(3);
  });

  test("concurrent requests never exceed an account's max_concurrency; extra ones wait and then run", async () => {
    const { pool } = setup();
    let running = { a: 0, b: 0 } as Record<string, number>;
    const peak = { a: 0, b: 0 } as Record<string, number>;
    const attempt = async (ctx: AttemptContext) => {
      running[ctx.account.id]!++;
      peak[ctx.account.id] = Math.max(peak[ctx.account.id]!, running[ctx.account.id]!);
      await Bun.sleep(5);
      running[ctx.account.id]!--;
      return ctx.account.id;
    };
    const results = await Promise.all(Array.from({ length: 12 }, () => pool.run(attempt)));
    expect(results).toHaveLength(12);
    expect(peak.a).toBeLessThanOrEqual(2);
    expect(peak.b).toBeLessThanOrEqual(1);
    expect(peak.a! + peak.b!).toBe(3); // all capacity was used
    running = {};
  });

  test("a waiting request gets the capacity freed by a finished one", async () => {
    const { pool } = setup([{ id: "a", weight: 1, maxConcurrency: 1 }]);
    let release!: () => void;
    const first = pool.run(() => new Promise<string>((r) => (release = () => r("first"))));
    await Bun.sleep(1);
    const second = pool.run(async () => "second");
    await Bun.sleep(5);
    expect(pool.snapshot()[0]!.inFlight).toBe(1);
    release();
    expect((await first).value).toBe("first");
    expect((await second).value).toBe("second");
  });

  test("waiting requests are served in arrival order; one arriving while others wait queues behind them", async () => {
    const { pool } = setup([{ id: "a", weight: 1, maxConcurrency: 1 }]);
    const started: string[] = [];
    const releases = new Map<string, () => void>();
    const hold = (name: string) => () => {
      started.push(name);
      return new Promise<string>((r) => releases.set(name, () => r(name)));
    };
    const first = pool.run(hold("first"));
    await Bun.sleep(1);
    const waiting = [pool.run(hold("second")), pool.run(hold("third"))];
    await Bun.sleep(5);
    expect(started).toEqual(["first"]);
    releases.get("first")!();
    await first;
    // The slot is free at this instant, but two requests are queued for it: the newcomer goes last.
    const late = pool.run(hold("late"));
    for (const name of ["second", "third", "late"]) {
      for (let i = 0; i < 500 && !releases.has(name); i++) await Bun.sleep(1);
      expect(started.at(-1)).toBe(name);
      expect(pool.snapshot()[0]!.inFlight).toBe(1);
      releases.get(name)!();
    }
    expect((await Promise.all([...waiting, late])).map((r) => r.value)).toEqual(["second", "third", "late"]);
    expect(started).toEqual(["first", "second", "third", "late"]);
  });

  test("waiting for capacity ends at the queue deadline with EngineTimeout", async () => {
    const store = createStore(openDatabase(":memory:"), latestVersion());
    const pool = new AccountPool("up", [{ id: "a", weight: 1, maxConcurrency: 1 }], { ...SETTINGS, queueTimeoutMs: 30 }, store.upstreams, Date.now);
    let release!: () => void;
    const first = pool.run(() => new Promise<string>((r) => (release = () => r("first"))));
    const err = await pool.run(async () => "second").catch((e) => e);
    expect(err).toBeInstanceOf(EngineTimeout);
    expect((err as EngineTimeout).message).toContain("free capacity");
    release();
    await first;
  });
});

describe("failures", () => {
  test("429 with retry-after: served by the other account, the first cools down for the stated time", async () => {
    const { pool, now } = setup();
    const { calls, attempt } = scripted({ a: [new AttemptFailure("rate_limited", "slow down", 2000, 429)] });
    const r = await pool.run(attempt);
    expect(r.value).toBe("b");
    expect(calls).toEqual(["a", "b"]);
    expect(r.trace).toMatchObject({ upstreamId: "up", accountId: "b", attempts: 2 });
    const a = pool.snapshot().find((s) => s.accountId === "a")!;
    expect(a.state).toBe("cooling");
    expect(a.coolingUntil).toBe(now() + 2000);
  });

  test("429 with a retry-after of years: the account rests a day at most", async () => {
    const { pool, now } = setup();
    await pool.run(scripted({ a: [new AttemptFailure("rate_limited", "slow down", 1e21, 429)] }).attempt);
    expect(pool.snapshot().find((s) => s.accountId === "a")!.coolingUntil).toBe(now() + MAX_RETRY_AFTER_MS);
  });

  test("429 without a hint: 1 s, then doubling per consecutive 429, capped", async () => {
    const { pool, now, advance } = setup([{ id: "a", weight: 1, maxConcurrency: 1 }], { maxAttempts: 1, rateLimitCooldownMaxMs: 3000 });
    const expected = [1000, 2000, 3000, 3000];
    for (const ms of expected) {
      const err = await pool.run(scripted({ a: [new AttemptFailure("rate_limited", "429")] }).attempt).catch((e) => e);
      expect(err).toBeInstanceOf(UpstreamRateLimited);
      expect(pool.snapshot()[0]!.coolingUntil).toBe(now() + ms);
      expect((err as UpstreamRateLimited).retryAfterMs).toBe(ms);
      advance(ms);
    }
  });

  test("every account cooling: UpstreamRateLimited with the earliest recovery, no attempt made", async () => {
    const { pool, advance } = setup();
    await pool
      .run(scripted({ a: [new AttemptFailure("rate_limited", "x", 5000)], b: [new AttemptFailure("rate_limited", "x", 3000)] }).attempt)
      .catch(() => {});
    advance(1000);
    const { calls, attempt } = scripted({});
    const err = await pool.run(attempt).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRateLimited);
    expect((err as UpstreamRateLimited).retryAfterMs).toBe(2000);
    expect(calls).toEqual([]);
    advance(2000);
    expect((await pool.run(attempt)).value).toBe("b");
  });

  test("attempts run out on a 429 while another account is free: retry-after is short, not the 429's", async () => {
    const { pool } = setup(undefined, { maxAttempts: 1 });
    const err = await pool.run(scripted({ a: [new AttemptFailure("rate_limited", "x", 30_000)] }).attempt).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRateLimited);
    expect((err as UpstreamRateLimited).retryAfterMs).toBe(1000);
  });

  test("5xx then success elsewhere; attempts run out after max_attempts with UpstreamFailed", async () => {
    const { pool } = setup();
    const fail = () => new AttemptFailure("failed", "upstream answered 500", undefined, 500);
    const ok = await pool.run(scripted({ a: [fail()] }).attempt);
    expect(ok.trace).toMatchObject({ accountId: "b", attempts: 2 });
    // A fresh pool whose threshold is not reached, so each account can be tried again.
    const patient = setup(undefined, { failureThreshold: 10 });
    const { calls, attempt } = scripted({ a: [fail(), fail()], b: [fail(), fail()] });
    const err = await patient.pool.run(attempt).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(calls).toHaveLength(3);
    expect((err as UpstreamFailed).trace).toMatchObject({ upstreamId: "up", attempts: 3 });
  });

  test("consecutive failures cool the account down; after it one probe decides", async () => {
    const { pool, advance, now } = setup([{ id: "a", weight: 1, maxConcurrency: 3 }], { maxAttempts: 1, failureThreshold: 2, failureCooldownMs: 1000 });
    const fail = () => new AttemptFailure("failed", "boom");
    await pool.run(scripted({ a: [fail()] }).attempt).catch(() => {});
    expect(pool.snapshot()[0]!.state).toBe("healthy");
    await pool.run(scripted({ a: [fail()] }).attempt).catch(() => {});
    expect(pool.snapshot()[0]).toMatchObject({ state: "cooling", coolingUntil: now() + 1000 });
    advance(1000);
    expect(pool.snapshot()[0]!.state).toBe("probing");
    // While the probe is out, the account takes nothing else even though its capacity is 3.
    let finishProbe!: () => void;
    const probe = pool.run(() => new Promise<string>((r) => (finishProbe = () => r("probe"))));
    await Bun.sleep(1);
    const waiting = pool.run(async () => "after");
    await Bun.sleep(5);
    expect(pool.snapshot()[0]!.inFlight).toBe(1);
    finishProbe();
    expect((await probe).value).toBe("probe");
    expect((await waiting).value).toBe("after");
    expect(pool.snapshot()[0]).toMatchObject({ state: "healthy", consecutiveFailures: 0 });
    // A failed probe doubles the cooldown.
    await pool.run(scripted({ a: [fail()] }).attempt).catch(() => {});
    await pool.run(scripted({ a: [fail()] }).attempt).catch(() => {});
    advance(1000);
    await pool.run(scripted({ a: [fail()] }).attempt).catch(() => {});
    expect(pool.snapshot()[0]).toMatchObject({ state: "cooling", coolingUntil: now() + 2000 });
  });

  test("a timeout is retried elsewhere; if it was the last attempt the request ends in EngineTimeout", async () => {
    const { pool } = setup(undefined, { attemptTimeoutMs: 20 });
    const hang = (ctx: AttemptContext) =>
      new Promise<string>((resolve, reject) => {
        if (ctx.account.id === "b") return resolve("b");
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason));
      });
    expect((await pool.run(hang)).value).toBe("b");
    const single = setup([{ id: "a", weight: 1, maxConcurrency: 1 }], { attemptTimeoutMs: 20, maxAttempts: 1 });
    const err = await single.pool.run(hang).catch((e) => e);
    expect(err).toBeInstanceOf(EngineTimeout);
  });

  test("401/403 disables the account in the store until enabled; logged with the account id", async () => {
    const dir = mkdtempSync(join(tmpdir(), "atelier-pool-"));
    const { pool, store, logs, advance } = setup(undefined, undefined, dir);
    const r = await pool.run(scripted({ a: [new AttemptFailure("auth", "credentials refused (401): bad key", undefined, 401)] }).attempt);
    expect(r.value).toBe("b");
    expect((await store.upstreams.disabledAccounts("up")).get("a")?.reason).toContain("401");
    expect(pool.snapshot().find((s) => s.accountId === "a")!.state).toBe("disabled");
    expect(logs.some((l) => l.includes("disabled") && l.includes('"account":"a"'))).toBe(true);
    // Only b serves now.
    const { calls, attempt } = scripted({});
    for (let i = 0; i < 3; i++) await pool.run(attempt);
    expect(calls).toEqual(["b", "b", "b"]);
    // Re-enabled through another connection (as the CLI in another process does): used again
    // once the pool's change check comes round (at most 100 ms), without a query on every pick.
    const other = createStore(openDatabase(dir), latestVersion());
    expect(await other.upstreams.enableAccount("up", "a")).toBe(true);
    await other.close();
    advance(100);
    for (let i = 0; i < 3; i++) await pool.run(attempt);
    expect(calls.slice(3)).toContain("a");
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("the disabled flags are read again only when another process wrote, at most every 100 ms, not on every pick", async () => {
    let now = 1_000_000;
    let revision = 7;
    let reads = 0;
    const flags = new Map<string, { reason: string; at: number }>([["a", { reason: "401", at: 1 }]]);
    const store = {
      disabledAccounts: async () => (reads++, new Map(flags)),
      disableAccount: async () => {},
      saveSnapshot: async () => {},
      externalRevision: async () => revision,
    };
    const pool = new AccountPool("up", [{ id: "a", weight: 1, maxConcurrency: 1 }, { id: "b", weight: 1, maxConcurrency: 1 }], SETTINGS, store, () => now);
    const { calls, attempt } = scripted({});
    for (let i = 0; i < 5; i++, now += 200) await pool.run(attempt);
    expect(reads).toBe(1); // at construction only: the revision never moved
    expect(calls).toEqual(["b", "b", "b", "b", "b"]);
    // Another process enables a: the revision moves; seen at the next check, not before.
    flags.clear();
    revision++;
    await pool.run(attempt);
    expect(reads).toBe(2);
    for (let i = 0; i < 3; i++) await pool.run(attempt);
    expect(reads).toBe(2); // within 100 ms of the last check nothing is read again
    expect(calls.slice(5)).toContain("a");
  });

  test("all accounts disabled: UpstreamUnavailable", async () => {
    const { pool } = setup();
    const auth = () => new AttemptFailure("auth", "401", undefined, 401);
    const err = await pool.run(scripted({ a: [auth()], b: [auth()] }).attempt).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamUnavailable);
    const again = await pool.run(scripted({}).attempt).catch((e) => e);
    expect(again).toBeInstanceOf(UpstreamUnavailable);
  });

  test("a rejection is not retried and does not mark the account", async () => {
    const { pool } = setup();
    const { calls, attempt } = scripted({ a: [new AttemptFailure("rejected", "size not supported", undefined, 400)] });
    const err = await pool.run(attempt).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect((err as UpstreamRejected).message).toBe("size not supported");
    expect(calls).toEqual(["a"]);
    expect(pool.snapshot().every((s) => s.state === "healthy" && s.recentFailures.length === 0)).toBe(true);
  });

  test("the snapshot reaches the store for the CLI", async () => {
    const { pool, store } = setup();
    await pool.run(scripted({ a: [new AttemptFailure("failed", "upstream answered 502")] }).attempt);
    await pool.persistSnapshot();
    const rows = await store.upstreams.loadSnapshots();
    expect(rows.get("up/a")?.snapshot.recentFailures[0]).toMatchObject({ kind: "failed", message: "upstream answered 502" });
    expect(rows.get("up/b")?.snapshot.capacity).toBe(1);
    await pool.close();
  });

  test("closing the pool writes the final state, so the CLI does not show a stale mid-request count", async () => {
    const { pool, store } = setup();
    let release!: () => void;
    const running = pool.run(() => new Promise<string>((r) => (release = () => r("a"))));
    await Bun.sleep(0);
    await pool.persistSnapshot();
    expect((await store.upstreams.loadSnapshots()).get("up/a")?.snapshot.inFlight).toBe(1);
    release();
    await running;
    await pool.close();
    expect((await store.upstreams.loadSnapshots()).get("up/a")?.snapshot.inFlight).toBe(0);
  });
});

describe("runTraced", () => {
  test("the trace is set on the attempt's own value: the account that answered and the attempts it took", async () => {
    const { pool } = setup([{ id: "a", weight: 1, maxConcurrency: 1 }, { id: "b", weight: 1, maxConcurrency: 1 }]);
    let calls = 0;
    const reply = await pool.runTraced(async (ctx) => {
      if (++calls === 1) throw new AttemptFailure("failed", "upstream answered 502");
      return { answeredBy: ctx.account.id } as { answeredBy: string; trace?: UpstreamTrace };
    });
    expect(reply.answeredBy).toBe("b");
    expect(reply.trace).toEqual({ upstreamId: "up", accountId: "b", attempts: 2, upstreamLatencyMs: 0 });
  });

  test("a failure keeps its trace on the error, as run() does; a request scope given is not released by the pool", async () => {
    const { pool } = setup([{ id: "a", weight: 1, maxConcurrency: 1 }], { maxAttempts: 1 });
    const request = new CancelScope();
    const child = request.child();
    const err = await pool.runTraced(async () => {
      throw new AttemptFailure("failed", "upstream answered 500");
    }, request).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(err.trace).toMatchObject({ upstreamId: "up", accountId: "a", attempts: 1 });
    // The caller's scope still links its children: the pool owns only the scopes it made.
    request.abort(new Error("later"));
    expect(child.aborted).toBe(true);
  });
});

describe("cancellation", () => {
  /** An attempt that waits until its signal aborts, and reports the reason. */
  const hangUntilAborted = (ctx: AttemptContext) => new Promise<string>((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason)));

  test("the request's scope aborts the running attempt; the request ends in EngineTimeout, no retry", async () => {
    const { pool } = setup();
    const request = new CancelScope();
    const seen: string[] = [];
    const run = pool.run((ctx) => (seen.push(ctx.account.id), hangUntilAborted(ctx)), request);
    await Bun.sleep(5);
    request.abort(new Error("client left"));
    expect(await run.catch((e) => e)).toBeInstanceOf(EngineTimeout);
    expect(seen).toHaveLength(1);
  });

  test("the same through an AbortSignal; the pool stops listening to it once the request ends", async () => {
    const { pool } = setup();
    const controller = new AbortController();
    const run = pool.run(hangUntilAborted, controller.signal);
    await Bun.sleep(5);
    controller.abort(new Error("client left"));
    expect(await run.catch((e) => e)).toBeInstanceOf(EngineTimeout);
    // A request that succeeded: aborting its signal afterwards reaches nothing of it.
    const done = new AbortController();
    let attemptSignal: AbortSignal | undefined;
    expect((await pool.run(async (ctx) => ((attemptSignal = ctx.signal), "ok"), done.signal)).value).toBe("ok");
    done.abort();
    expect(attemptSignal!.aborted).toBe(false);
  });

  test("a request already cancelled makes no attempt", async () => {
    const { pool } = setup();
    const request = new CancelScope();
    request.abort();
    const { calls, attempt } = scripted({});
    expect(await pool.run(attempt, request).catch((e) => e)).toBeInstanceOf(EngineTimeout);
    expect(calls).toEqual([]);
  });

  test("an attempt's own deadline aborts only that attempt: the request's scope stays usable", async () => {
    const { pool } = setup(undefined, { attemptTimeoutMs: 20 });
    const request = new CancelScope();
    const reasons: unknown[] = [];
    const attempt = (ctx: AttemptContext) =>
      ctx.account.id === "b" ? Promise.resolve("b") : hangUntilAborted(ctx).catch((e) => { reasons.push(e); throw e; });
    expect((await pool.run(attempt, request)).value).toBe("b");
    expect((reasons[0] as DOMException).name).toBe("TimeoutError");
    expect(request.aborted).toBe(false);
  });
});
