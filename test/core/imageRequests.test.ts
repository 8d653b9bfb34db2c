/**
 * One image request from balance check to recorded outcome, without HTTP: a scripted engine,
 * the real SQLite store in memory, a real gate, and a fake clock for every time the flow
 * records. The money invariants: a request that produces a verified image costs exactly 1
 * credit; any failure after the charge is refunded exactly once before the error reaches the
 * caller; a failure before the charge costs nothing; the gate slot always comes back.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BackgroundWork } from "../../src/core/background";
import { GateRejected, LocalGate, type Gate, type GateLimits } from "../../src/core/gate";
import { runImageRequest, type ImageFlowDeps, type ImageRequest } from "../../src/core/imageRequests";
import { ClientDisconnected, NoEngineError } from "../../src/core/requestFlow";
import type { CatalogModel } from "../../src/core/models";
import { EngineRegistry } from "../../src/engines/registry";
import { EngineOutputInvalid, EngineTimeout, UpstreamFailed, UpstreamRejected, type GeneratedImage, type ImageJob } from "../../src/core/engine";
import { createLogger } from "../../src/logger";
import { createStore, type Store } from "../../src/store";
import { DatabaseBusyError } from "../../src/core/store";
import { InsufficientCreditsError } from "../../src/core/store";
import { ImageInputError } from "../../src/core/imageInput";
import { databasePath, latestVersion, openDatabase } from "../../src/store/database";
import { fakeClock } from "../support/fakeClock";
import { ControlledEngine, makePng } from "../support/images";
import { until } from "../support/until";
import { addUser, interceptBusy, memoryStore, rawDb, trackRawDb } from "../support/memoryStore";

/** Tests that would wait forever if a record never landed fail after this instead. */
const HANG = 5000;

const MODEL: CatalogModel = { id: "test-image", kind: "image", ownedBy: "test", created: 0, source: { kind: "upstream", upstreamId: "fake" }, upstreamModel: "test-image", params: {}, price: 1 };

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

interface Options {
  credits?: number;
  gate?: Partial<GateLimits>;
  generationTimeoutMs?: number;
  busyWaitMs?: number;
  store?: Store;
}

function setup(opts: Options = {}) {
  const clock = fakeClock();
  const store = opts.store ?? memoryStore();
  const user = addUser(store, opts.credits ?? 3, clock.now());
  const localGate = new LocalGate({ subject: "image requests", global: 2, perUser: 2, queueSize: 4, queueTimeoutMs: 5000, ...opts.gate }, clock.now);
  let admissions = 0;
  let peak = 0;
  const gate: Gate = {
    admit: async (userId, signal) => {
      admissions++;
      const permit = await localGate.admit(userId, signal);
      peak = Math.max(peak, localGate.stats().running);
      return permit;
    },
    stats: () => localGate.stats(),
  };
  const engine = new ControlledEngine();
  const engines = new EngineRegistry();
  engines.registerUpstreamImage("fake", engine);
  const background = new BackgroundWork();
  const logs: { level: string; msg: string; [k: string]: unknown }[] = [];
  const deps: ImageFlowDeps = {
    store,
    gate,
    engines,
    background,
    logger: createLogger((line) => logs.push(JSON.parse(line))),
    clock: clock.now,
    generationTimeoutMs: opts.generationTimeoutMs ?? 5000,
    busyWaitMs: opts.busyWaitMs ?? 30,
    describeFailure: (e) => ({ code: e instanceof Error ? e.name : "unknown", message: e instanceof Error ? e.message : String(e) }),
  };
  let n = 0;
  const request = (over: Partial<ImageRequest> = {}): ImageRequest => ({
    requestId: `req_${++n}`,
    userId: user,
    keyId: null,
    kind: "generate",
    job: { model: MODEL, prompt: "a red square", size: { width: 8, height: 8 }, quality: "auto", images: [], extra: {} },
    ...over,
  });
  /** Everything money-related about one request. */
  const money = async (requestId: string) => ({
    balance: await store.credits.balance(user),
    ledgerSum: await store.credits.ledgerSum(user),
    rows: rawDb(store).query<{ kind: string; amount: number }, [string]>("SELECT kind, amount FROM ledger WHERE request_id = ? ORDER BY id").all(requestId),
    status: (await store.requests.get(requestId))?.status ?? null,
  });
  return { deps, store, user, clock, gate, engine, background, logs, request, money, admissions: () => admissions, peak: () => peak };
}

const CHARGED = [{ kind: "charge", amount: -1 }];
const REFUNDED = [
  { kind: "charge", amount: -1 },
  { kind: "refund", amount: 1 },
];

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected the request to fail");
    },
    (e: unknown) => e,
  );
}

describe("success", () => {
  test("charges exactly 1 credit, records the request succeeded at the clock's times, and releases the slot", async () => {
    const { deps, store, engine, clock, gate, background, request, money } = setup({ credits: 3 });
    const chargedAt = clock.now();
    engine.behave = async (job) => {
      clock.advance(2500);
      return { ...engine.png(job), trace: { upstreamId: "up", accountId: "acct-1", attempts: 2, upstreamLatencyMs: 900 } };
    };
    const req = request();
    const outcome = await runImageRequest(deps, req);
    expect([outcome.image.width, outcome.image.height]).toEqual([8, 8]);
    expect(outcome.queueMs).toBe(0);
    expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: CHARGED, status: "succeeded" });
    expect(await store.requests.get(req.requestId)).toMatchObject({
      user_id: req.userId,
      model: "test-image",
      endpoint: "/v1/images/generations",
      prompt: "a red square",
      credits_charged: 1,
      credits_refunded: 0,
      created_at: chargedAt,
      finished_at: chargedAt + 2500,
      queue_ms: 0,
      upstream_id: "up",
      account_id: "acct-1",
      attempts: 2,
      upstream_latency_ms: 900,
    });
    expect(engine.calls).toHaveLength(1);
    expect(engine.calls[0]!.signal.aborted).toBe(false);
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
    expect(background.size).toBe(0);
  });

  test("an edit calls the engine's edit, not generate", async () => {
    const { deps, engine, request, money } = setup();
    let called = "";
    engine.generate = async (job: ImageJob) => ((called = "generate"), engine.png(job));
    engine.edit = async (job: ImageJob) => ((called = "edit"), engine.png(job));
    const req = request({ kind: "edit" });
    await runImageRequest(deps, req);
    expect(called).toBe("edit");
    expect((await money(req.requestId)).status).toBe("succeeded");
  });

  test("the time spent queued in the gate is reported and recorded", async () => {
    const { deps, store, engine, clock, request } = setup({ gate: { global: 1 } });
    engine.hold();
    const first = runImageRequest(deps, request());
    await until(() => engine.waiting === 1, "the first generation");
    const req = request();
    const second = runImageRequest(deps, req);
    await Bun.sleep(1);
    clock.advance(700);
    engine.releaseAll();
    await first;
    await until(() => engine.waiting === 1, "the second generation");
    engine.releaseAll();
    const outcome = await second;
    expect(outcome.queueMs).toBe(700);
    expect((await store.requests.get(req.requestId))?.queue_ms).toBe(700);
  });
});

describe("failures after the charge are refunded exactly once, then rethrown", () => {
  const png = makePng(8, 8);
  const cases: [string, (engine: ControlledEngine) => ImageEngineBehaviour, new (...a: never[]) => Error][] = [
    ["the engine fails", () => async () => Promise.reject(new UpstreamFailed("503 from upstream")), UpstreamFailed],
    ["the engine throws synchronously", () => () => { throw new UpstreamRejected("policy"); }, UpstreamRejected],
    ["no bytes", () => async () => ({ bytes: new Uint8Array(0), mime: "image/png", width: 8, height: 8 }), EngineOutputInvalid],
    ["bytes that are not an image", () => async () => ({ bytes: new TextEncoder().encode("<html>oops</html>"), mime: "image/png", width: 8, height: 8 }), EngineOutputInvalid],
    ["a PNG reported as JPEG", () => async () => ({ bytes: png, mime: "image/jpeg", width: 8, height: 8 }), EngineOutputInvalid],
    ["a size that is not the header's", () => async () => ({ bytes: png, mime: "image/png", width: 16, height: 8 }), EngineOutputInvalid],
    ["a valid header over truncated data", () => async () => ({ bytes: png.slice(0, 45), mime: "image/png", width: 8, height: 8 }), EngineOutputInvalid],
  ];
  for (const [name, behaviour, kind] of cases) {
    test(name, async () => {
      const { deps, store, engine, gate, background, logs, request, money } = setup({ credits: 2 });
      engine.behave = behaviour(engine);
      const req = request();
      const err = await failure(runImageRequest(deps, req));
      expect(err).toBeInstanceOf(kind);
      // Refunded before the error reached the caller, once.
      expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: REFUNDED, status: "failed" });
      expect(await store.requests.get(req.requestId)).toMatchObject({ error_code: (err as Error).name, credits_refunded: 1 });
      expect(gate.stats()).toEqual({ running: 0, queued: 0 });
      expect(logs.find((l) => l.msg === "image request failed")).toMatchObject({ request_id: req.requestId, refunded: true });
      await background.idle();
      expect((await money(req.requestId)).rows).toEqual(REFUNDED);
    });
  }

  test("an engine failure's upstream trace is recorded with the refund", async () => {
    const { deps, store, engine, request, money } = setup();
    engine.behave = async () => {
      const e = new UpstreamFailed("attempts ran out");
      e.trace = { upstreamId: "up", accountId: "acct-2", attempts: 3 };
      throw e;
    };
    const req = request();
    await failure(runImageRequest(deps, req));
    expect((await money(req.requestId)).rows).toEqual(REFUNDED);
    expect(await store.requests.get(req.requestId)).toMatchObject({ upstream_id: "up", account_id: "acct-2", attempts: 3 });
  });

  test("the deadline: EngineTimeout, the engine's signal is aborted, refunded once", async () => {
    const { deps, store, engine, gate, request, money } = setup({ generationTimeoutMs: 30 });
    engine.behave = (job) => new Promise((_, reject) => job.signal.addEventListener("abort", () => reject(new UpstreamFailed("aborted"))));
    const req = request();
    const started = performance.now();
    const err = await failure(runImageRequest(deps, req));
    expect(err).toBeInstanceOf(EngineTimeout);
    expect(performance.now() - started).toBeLessThan(500);
    expect(engine.calls[0]!.signal.aborted).toBe(true);
    expect(engine.calls[0]!.signal.reason).toBe(err);
    expect(await money(req.requestId)).toEqual({ balance: 3, ledgerSum: 3, rows: REFUNDED, status: "failed" });
    expect((await store.requests.get(req.requestId))?.error_code).toBe("EngineTimeout");
    expect(gate.stats().running).toBe(0);
  });

  test("an image that arrives after the deadline changes nothing: still refunded once, still failed", async () => {
    const { deps, engine, background, request, money } = setup({ generationTimeoutMs: 20 });
    let late!: Promise<GeneratedImage>;
    engine.behave = (job) => (late = Bun.sleep(60).then(() => engine.png(job)));
    const req = request();
    expect(await failure(runImageRequest(deps, req))).toBeInstanceOf(EngineTimeout);
    await late;
    await background.idle();
    expect(await money(req.requestId)).toEqual({ balance: 3, ledgerSum: 3, rows: REFUNDED, status: "failed" });
  });

  test("a recovery that refunds the request mid-generation: no second refund, and no image for free", async () => {
    const { deps, store, engine, request, money, clock } = setup();
    engine.behave = async (job) => {
      await store.credits.recoverInterrupted(clock.now()); // e.g. another process recovering at startup
      return engine.png(job);
    };
    const req = request();
    await failure(runImageRequest(deps, req));
    expect(await money(req.requestId)).toEqual({ balance: 3, ledgerSum: 3, rows: REFUNDED, status: "interrupted" });
  });
});

type ImageEngineBehaviour = (job: ImageJob) => Promise<GeneratedImage>;

describe("failures before the charge cost nothing", () => {
  test("an input that does not decode: ImageInputError naming its field, nothing charged or recorded, the engine not called, the slot released", async () => {
    const { deps, engine, gate, request, money, admissions } = setup({ credits: 1 });
    const png = makePng(8, 8);
    // A valid header over truncated pixel data: only a full decode (in the decode pool) tells.
    const truncated = { bytes: png.subarray(0, png.length - 20), mime: "image/png" as const, width: 8, height: 8, param: "reference_images[1]" };
    const good = { bytes: png, mime: "image/png" as const, width: 8, height: 8, param: "reference_images[0]" };
    const req = request({ job: { ...request().job, images: [good, truncated] } });
    const err = await failure(runImageRequest(deps, req));
    expect(err).toBeInstanceOf(ImageInputError);
    expect((err as ImageInputError).param).toBe("reference_images[1]");
    expect(admissions()).toBe(1);
    expect(await money(req.requestId)).toEqual({ balance: 1, ledgerSum: 1, rows: [], status: null });
    expect(engine.calls).toHaveLength(0);
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("the engine's own input limits are checked while the slot is held, before the charge", async () => {
    const { deps, engine, gate, request, money, store } = setup({ credits: 1 });
    const seen: unknown[] = [];
    // inputProblem is synchronous: the balance at that moment, read straight from the database.
    const balanceNow = () => rawDb(store).query<{ credits: number }, []>("SELECT credits FROM users").get()?.credits;
    engine.inputProblem = (_job, kind) => {
      seen.push(gate.stats().running, balanceNow(), kind);
      return { image: 0, message: "is larger than this engine takes" };
    };
    const png = makePng(8, 8);
    const req = request({ kind: "edit", job: { ...request().job, images: [{ bytes: png, mime: "image/png", width: 8, height: 8, param: "image" }] } });
    const err = await failure(runImageRequest(deps, req));
    expect(err).toBeInstanceOf(ImageInputError);
    expect(err).toMatchObject({ param: "image", reason: "image_not_supported" });
    expect(seen).toEqual([1, 1, "edit"]);
    expect(await money(req.requestId)).toEqual({ balance: 1, ledgerSum: 1, rows: [], status: null });
  });

  test("no engine for the model's upstream: NoEngineError before anything else, nothing charged, no slot taken", async () => {
    const { deps, gate, request, money } = setup();
    const req = request({ job: { ...request().job, model: { ...MODEL, source: { kind: "upstream", upstreamId: "missing" } } } });
    expect(await failure(runImageRequest(deps, req))).toBeInstanceOf(NoEngineError);
    expect(await money(req.requestId)).toEqual({ balance: 3, ledgerSum: 3, rows: [], status: null });
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("no credits: InsufficientCreditsError before the gate, nothing charged, no slot taken", async () => {
    const { deps, engine, request, money, admissions } = setup({ credits: 0 });
    const req = request();
    expect(await failure(runImageRequest(deps, req))).toBeInstanceOf(InsufficientCreditsError);
    expect(admissions()).toBe(0);
    expect(engine.calls).toHaveLength(0);
    expect(await money(req.requestId)).toEqual({ balance: 0, ledgerSum: 0, rows: [], status: null });
  });

  test("two requests for the last credit: one is charged, the other refused by the charge itself with nothing recorded", async () => {
    const { deps, engine, gate, request, money } = setup({ credits: 1 });
    engine.hold();
    const a = request();
    const b = request();
    const first = runImageRequest(deps, a);
    const second = failure(runImageRequest(deps, b)); // passes the balance pre-check too
    expect(await second).toBeInstanceOf(InsufficientCreditsError);
    expect(await money(b.requestId)).toMatchObject({ rows: [], status: null });
    expect(gate.stats().running).toBe(1);
    engine.releaseAll();
    await first;
    expect(await money(a.requestId)).toEqual({ balance: 0, ledgerSum: 0, rows: CHARGED, status: "succeeded" });
    expect(gate.stats().running).toBe(0);
  });

  test("a full gate: GateRejected, nothing charged", async () => {
    const { deps, engine, request, money } = setup({ gate: { global: 1, queueSize: 0 } });
    engine.hold();
    const running = runImageRequest(deps, request());
    await until(() => engine.waiting === 1, "the first generation");
    const req = request();
    const err = await failure(runImageRequest(deps, req));
    expect(err).toBeInstanceOf(GateRejected);
    expect((err as GateRejected).reason).toBe("queue_full");
    expect(await money(req.requestId)).toMatchObject({ balance: 2, rows: [], status: null });
    engine.releaseAll();
    await running;
  });

  test("a client that goes away while queued: nothing charged; one that goes away after the charge still gets its generation finished and charged", async () => {
    const { deps, engine, gate, request, money } = setup({ gate: { global: 1 } });
    engine.hold();
    const leaves = new AbortController();
    const first = request();
    const running = runImageRequest(deps, first, leaves.signal);
    await until(() => engine.waiting === 1, "the first generation");
    const queuedAbort = new AbortController();
    const queued = request();
    const gone = failure(runImageRequest(deps, queued, queuedAbort.signal));
    await Bun.sleep(1);
    expect(gate.stats().queued).toBe(1);
    queuedAbort.abort();
    expect(((await gone) as GateRejected).reason).toBe("aborted");
    expect(await money(queued.requestId)).toMatchObject({ rows: [], status: null });
    leaves.abort(); // after the charge: the generation goes on
    expect(engine.calls[0]!.signal.aborted).toBe(false);
    engine.releaseAll();
    await running;
    expect(await money(first.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: CHARGED, status: "succeeded" });
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });
  test("a client that goes away as it is admitted, before the charge: ClientDisconnected, nothing charged, the engine not called", async () => {
    const { deps, engine, gate, request, money } = setup();
    const client = new AbortController();
    // The client hangs up in the very turn its request is admitted.
    const admit = deps.gate.admit.bind(deps.gate);
    deps.gate = {
      ...deps.gate,
      admit: async (userId, signal) => {
        const permit = await admit(userId, signal);
        client.abort();
        return permit;
      },
    };
    const req = request();
    expect(await failure(runImageRequest(deps, req, client.signal))).toBeInstanceOf(ClientDisconnected);
    expect(await money(req.requestId)).toMatchObject({ rows: [], status: null });
    expect(engine.calls).toHaveLength(0);
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });
});

describe("the gate slot", () => {
  test("many concurrent requests never run more than the gate allows, and every slot comes back", async () => {
    const { deps, engine, gate, request, store, user, peak } = setup({ credits: 10, gate: { global: 2, perUser: 2, queueSize: 10 } });
    let maxRunning = 0;
    const inner = engine.behave;
    engine.behave = async (job) => {
      const nth = engine.calls.length;
      maxRunning = Math.max(maxRunning, gate.stats().running);
      await Bun.sleep(2);
      if (nth % 3 === 0) throw new UpstreamFailed("every third fails");
      return inner(job);
    };
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => runImageRequest(deps, request())));
    expect(peak()).toBe(2);
    expect(maxRunning).toBeLessThanOrEqual(2);
    const ok = results.filter((r) => r.status === "fulfilled").length;
    expect(ok).toBe(6);
    expect(await store.credits.balance(user)).toBe(10 - ok);
    expect(await store.credits.ledgerSum(user)).toBe(10 - ok);
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("an engine that ignores its signal past the deadline keeps its slot and the graceful stop's count until it stops", async () => {
    const { deps, engine, gate, background, request, money } = setup({ gate: { global: 1, perUser: 1 }, generationTimeoutMs: 30 });
    engine.hold(); // never looks at its signal
    const first = request();
    expect(await failure(runImageRequest(deps, first))).toBeInstanceOf(EngineTimeout);
    expect((await money(first.requestId)).rows).toEqual(REFUNDED);
    expect(engine.waiting).toBe(1); // still generating
    expect(gate.stats().running).toBe(1);
    let idle = false;
    void background.idle().then(() => (idle = true));
    // The next request waits for the slot instead of running beside it.
    engine.behave = async (job) => engine.png(job);
    const second = runImageRequest(deps, request());
    await Bun.sleep(20);
    expect(gate.stats()).toEqual({ running: 1, queued: 1 });
    expect(engine.calls).toHaveLength(1);
    expect(idle).toBe(false);
    engine.releaseAll(); // the first engine stops at last
    await second;
    expect(engine.calls).toHaveLength(2);
    await until(() => idle, "the background idle once both have stopped");
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("the charged part is tracked as background work: a caller that stops waiting does not stop it", async () => {
    const { deps, engine, background, request, money } = setup();
    engine.hold();
    const req = request();
    void runImageRequest(deps, req).catch(() => {}); // nobody awaits it, like a disconnected client
    await until(() => engine.waiting === 1, "the generation");
    expect(background.size).toBeGreaterThan(0);
    const idle = background.idle();
    engine.releaseAll();
    await idle;
    expect((await money(req.requestId)).status).toBe("succeeded");
    expect(background.size).toBe(0);
  });
});

describe("the inputs' memory", () => {
  test("releaseInputs is called once the engine has stopped, after a success or a failure, and only then", async () => {
    const { deps, engine, background, request } = setup();
    engine.hold();
    let released = 0;
    const ok = runImageRequest(deps, request({ releaseInputs: () => released++ }));
    await until(() => engine.waiting === 1, "the engine holding the job");
    expect(released).toBe(0);
    engine.releaseAll();
    await ok;
    await background.idle();
    expect(released).toBe(1);

    engine.behave = async () => {
      throw new UpstreamFailed("no");
    };
    const failed = runImageRequest(deps, request({ releaseInputs: () => released++ }));
    expect(await failure(failed)).toBeInstanceOf(UpstreamFailed);
    await background.idle();
    expect(released).toBe(2);
  });

  test("an engine that runs past the deadline keeps its inputs until it stops", async () => {
    const { deps, engine, background, request } = setup({ generationTimeoutMs: 20 });
    let finishLate!: () => void;
    engine.behave = (job) => new Promise<GeneratedImage>((resolve) => (finishLate = () => resolve(engine.png(job))));
    let released = 0;
    expect(await failure(runImageRequest(deps, request({ releaseInputs: () => released++ })))).toBeInstanceOf(EngineTimeout);
    await Bun.sleep(20);
    expect(released).toBe(0);
    finishLate();
    await background.idle();
    await Bun.sleep(0);
    expect(released).toBe(1);
  });

  test("a request refused before the engine ran keeps them (a retry of the same request may still use them)", async () => {
    const { deps, engine, request } = setup({ credits: 0 });
    let released = 0;
    expect(await failure(runImageRequest(deps, request({ releaseInputs: () => released++ })))).toBeInstanceOf(InsufficientCreditsError);
    expect(engine.calls).toHaveLength(0);
    expect(released).toBe(0);
  });
});

describe("a database locked by another process", () => {
  test("busy during the charge a few times: retried, then charged once", async () => {
    const { deps, store, request, money } = setup({ busyWaitMs: 2000 });
    const busy = interceptBusy(store.credits, "chargeForImage", (call) => call <= 3);
    const req = request();
    await runImageRequest(deps, req);
    expect(busy.calls).toBe(4);
    expect(busy.landed).toBe(1);
    expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: CHARGED, status: "succeeded" });
  }, HANG);

  test("busy for the whole wait: DatabaseBusyError, nothing charged, the slot released", async () => {
    const { deps, store, engine, gate, request, money } = setup({ busyWaitMs: 30 });
    const busy = interceptBusy(store.credits, "chargeForImage", () => true);
    const req = request();
    const started = performance.now();
    const err = await failure(runImageRequest(deps, req));
    expect(err).toBeInstanceOf(DatabaseBusyError);
    expect(performance.now() - started).toBeLessThan(500);
    expect(busy.calls).toBeGreaterThan(1);
    expect(busy.landed).toBe(0);
    expect(await money(req.requestId)).toEqual({ balance: 3, ledgerSum: 3, rows: [], status: null });
    expect(engine.calls).toHaveLength(0);
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  }, HANG);

  test("busy while recording the success: the image is delivered, the record lands once the lock is gone", async () => {
    const { deps, store, gate, background, logs, request, money } = setup({ busyWaitMs: 30 });
    let locked = true;
    const busy = interceptBusy(store.requests, "markSucceeded", () => locked);
    const req = request();
    const outcome = await runImageRequest(deps, req);
    expect(outcome.image.width).toBe(8);
    expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: CHARGED, status: "pending" });
    expect(gate.stats().running).toBe(0);
    expect(logs.some((l) => l.level === "warn" && l.msg.includes("before its success is recorded"))).toBe(true);
    locked = false;
    await background.idle();
    expect(busy.landed).toBe(1);
    expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: CHARGED, status: "succeeded" });
  }, HANG);

  test("busy while refunding: the error is rethrown, the refund lands once the lock is gone, once", async () => {
    const { deps, store, engine, background, request, money } = setup({ busyWaitMs: 30 });
    engine.behave = async () => Promise.reject(new UpstreamFailed("503"));
    let locked = true;
    const busy = interceptBusy(store.credits, "refundOnce", () => locked);
    const req = request();
    expect(await failure(runImageRequest(deps, req))).toBeInstanceOf(UpstreamFailed);
    expect(await money(req.requestId)).toMatchObject({ balance: 2, rows: CHARGED, status: "pending" });
    locked = false;
    await background.idle();
    expect(busy.landed).toBe(1);
    expect(await money(req.requestId)).toEqual({ balance: 3, ledgerSum: 3, rows: REFUNDED, status: "failed" });
  }, HANG);

  test("a real write lock held by another connection: the charge waits for it without blocking, then lands once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "atelier-flow-"));
    dirs.push(dir);
    const db = openDatabase(dir);
    const store = trackRawDb(createStore(db, latestVersion()), db);
    const other = new Database(databasePath(dir));
    try {
      const { deps, request, money } = setup({ store, busyWaitMs: 2000 });
      store.setBusyTimeout(0); // as the server runs (store/busy.ts)
      other.exec("BEGIN IMMEDIATE");
      const req = request();
      const run = runImageRequest(deps, req);
      let ticks = 0;
      while (ticks < 5) {
        await Bun.sleep(2); // the event loop keeps turning while the charge waits
        ticks++;
      }
      expect((await money(req.requestId)).rows).toEqual([]);
      other.exec("COMMIT");
      await run;
      expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: CHARGED, status: "succeeded" });
    } finally {
      other.close();
      await store.close();
    }
  }, HANG);
});

describe("the model's price", () => {
  const priced = (price: number): CatalogModel => ({ ...MODEL, price });

  test("a success costs the model's price: one charge row of −price", async () => {
    const { deps, request, money } = setup({ credits: 5 });
    const req = request({ job: { ...request().job, model: priced(3) } });
    await runImageRequest(deps, req);
    expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: [{ kind: "charge", amount: -3 }], status: "succeeded" });
  });

  test("a failure refunds what was charged, even when the price changed in between", async () => {
    const { deps, engine, request, money } = setup({ credits: 5 });
    const model = priced(2);
    const req = request({ job: { ...request().job, model } });
    engine.hold("fail");
    const running = failure(runImageRequest(deps, req));
    await until(() => engine.waiting === 1, "the held job");
    expect((await money(req.requestId)).balance).toBe(3);
    // The operator raises the price while the request runs: the refund must return the 2 charged.
    model.price = 7;
    engine.releaseAll();
    expect(await running).toBeInstanceOf(UpstreamFailed);
    expect(await money(req.requestId)).toEqual({ balance: 5, ledgerSum: 5, rows: [{ kind: "charge", amount: -2 }, { kind: "refund", amount: 2 }], status: "failed" });
  });

  test("a balance below the price is refused before anything is charged, naming price and balance", async () => {
    const { deps, engine, request, money, admissions } = setup({ credits: 2 });
    const req = request({ job: { ...request().job, model: priced(3) } });
    const e = await failure(runImageRequest(deps, req));
    expect(e).toBeInstanceOf(InsufficientCreditsError);
    expect((e as InsufficientCreditsError).cost).toEqual({ price: 3, balance: 2 });
    expect(admissions()).toBe(0);
    expect(engine.calls.length).toBe(0);
    expect(await money(req.requestId)).toEqual({ balance: 2, ledgerSum: 2, rows: [], status: null });
  });

  test("a free model (price 0) charges nothing and writes no ledger row, yet keeps the request record", async () => {
    const { deps, engine, request, money } = setup({ credits: 0 });
    const ok = request({ job: { ...request().job, model: priced(0) } });
    await runImageRequest(deps, ok);
    expect(await money(ok.requestId)).toEqual({ balance: 0, ledgerSum: 0, rows: [], status: "succeeded" });
    engine.behave = async () => Promise.reject(new UpstreamFailed("503"));
    const bad = request({ job: { ...request().job, model: priced(0) } });
    expect(await failure(runImageRequest(deps, bad))).toBeInstanceOf(UpstreamFailed);
    expect(await money(bad.requestId)).toEqual({ balance: 0, ledgerSum: 0, rows: [], status: "failed" });
  });
});
