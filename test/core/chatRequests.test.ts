/**
 * runChatRequest with a scripted chat engine, the real SQLite store in memory, a real gate and a
 * fake clock: the reply, the history row for every outcome, the gate slot held until the engine
 * really stops, the deadline, a client that leaves, and a locked database that never delays or
 * changes the answer. Chat is free: no ledger row, whatever happens.
 */
import { describe, expect, test } from "bun:test";
import { BackgroundWork } from "../../src/core/background";
import { runChatRequest, type ChatFlowDeps, type ChatRequest } from "../../src/core/chatRequests";
import { ClientDisconnected, NoEngineError } from "../../src/core/requestFlow";
import { EngineTimeout, UpstreamFailed, type ChatEngine, type ChatJob, type ChatResult } from "../../src/core/engine";
import { GateRejected, LocalGate } from "../../src/core/gate";
import type { CatalogModel } from "../../src/core/models";
import { EngineRegistry } from "../../src/engines/registry";
import { createLogger } from "../../src/logger";
import { fakeClock } from "../support/fakeClock";
import { addUser, memoryStore } from "../support/memoryStore";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore, type Store } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

const MODEL: CatalogModel = { id: "test-chat", kind: "chat", ownedBy: "test", created: 0, source: { kind: "upstream", upstreamId: "fake" }, upstreamModel: "test-chat", params: {}, price: 0 };

const REPLY: ChatResult = { content: "hello", finishReason: "stop", usage: { promptTokens: 3, completionTokens: 1 } };

/** A chat engine whose behaviour each test scripts; it records the jobs it was given. */
class ScriptedChat implements ChatEngine {
  jobs: ChatJob[] = [];
  behave: (job: ChatJob) => Promise<ChatResult> = async () => REPLY;
  chat(job: ChatJob): Promise<ChatResult> {
    this.jobs.push(job);
    return this.behave(job);
  }
}

function setup(opts: { timeoutMs?: number; concurrency?: number; store?: Store } = {}) {
  const clock = fakeClock();
  const store = opts.store ?? memoryStore();
  const user = addUser(store, 0, clock.now());
  const engine = new ScriptedChat();
  const engines = new EngineRegistry();
  engines.registerUpstreamChat("fake", engine);
  const gate = new LocalGate({ subject: "chat completions", global: opts.concurrency ?? 2, perUser: opts.concurrency ?? 2, queueSize: 0, queueTimeoutMs: 0 });
  const background = new BackgroundWork();
  const deps: ChatFlowDeps = {
    store,
    gate,
    engines,
    background,
    logger: createLogger(() => {}),
    clock: clock.now,
    generationTimeoutMs: opts.timeoutMs ?? 5000,
    describeFailure: (e) => ({ code: e instanceof Error ? e.name : "unknown", message: e instanceof Error ? e.message : String(e) }),
  };
  let n = 0;
  const request = (over: Partial<ChatRequest> = {}): ChatRequest => ({
    requestId: `chatcmpl-${++n}`,
    userId: user,
    keyId: null,
    model: MODEL,
    messages: [{ role: "user", content: "hi" }],
    params: {},
    historyPrompt: "hi",
    ...over,
  });
  const row = async (id: string) => await store.requests.get(id);
  const ledgerRows = async () => (await store.credits.ledger(user, 100)).length;
  return { deps, store, user, clock, engine, gate, background, request, row, ledgerRows };
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected a failure");
}

describe("runChatRequest", () => {
  test("a reply: returned with its times, the history row succeeded with the tokens, no ledger row, the slot released", async () => {
    const { deps, engine, gate, background, request, row, ledgerRows } = setup();
    const req = request({ params: { temperature: 0.2 } });
    const outcome = await runChatRequest(deps, req);
    expect(outcome.result).toEqual(REPLY);
    expect(engine.jobs[0]).toMatchObject({ model: MODEL, messages: req.messages, params: { temperature: 0.2 } });
    expect(await row(req.requestId)).toMatchObject({ kind: "chat", status: "succeeded", prompt: "hi", prompt_tokens: 3, completion_tokens: 1, credits_charged: 0 });
    expect(await ledgerRows()).toBe(0);
    await background.idle();
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("the caller's answer is made in the flow's frame, once the history row is queued; a failure makes none", async () => {
    const { deps, store, engine, request, background } = setup();
    const req = request();
    const answer = await runChatRequest(deps, req, undefined, (outcome) => ({ text: outcome.result.content, queued: store.requests.queuedRecordOf(req.requestId)?.status }));
    expect(answer).toEqual({ text: REPLY.content, queued: "succeeded" });
    engine.behave = async () => {
      throw new UpstreamFailed("upstream answered 502");
    };
    let made = 0;
    expect(await failure(runChatRequest(deps, request(), undefined, () => ++made))).toBeInstanceOf(UpstreamFailed);
    expect(made).toBe(0);
    await background.idle();
  });

  test("an engine failure: rethrown as it is, recorded failed with the described code and the trace", async () => {
    const { deps, engine, request, row } = setup();
    engine.behave = async () => {
      const e = new UpstreamFailed("every attempt failed");
      e.trace = { upstreamId: "up", accountId: "a1", attempts: 3 };
      throw e;
    };
    const req = request();
    expect(await failure(runChatRequest(deps, req))).toBeInstanceOf(UpstreamFailed);
    expect(await row(req.requestId)).toMatchObject({ status: "failed", error_code: "UpstreamFailed", upstream_id: "up", account_id: "a1", attempts: 3 });
  });

  test("no engine for the model: NoEngineError before the gate, nothing recorded", async () => {
    const { deps, gate, request, row } = setup();
    const req = request({ model: { ...MODEL, source: { kind: "upstream", upstreamId: "missing" } } });
    expect(await failure(runChatRequest(deps, req))).toBeInstanceOf(NoEngineError);
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
    expect(await row(req.requestId)).toBeNull();
  });

  test("the chat gate has no queue: over the limit is GateRejected at once, nothing recorded", async () => {
    const { deps, engine, request, row } = setup({ concurrency: 1 });
    let release!: () => void;
    engine.behave = () => new Promise((resolve) => (release = () => resolve(REPLY)));
    const first = runChatRequest(deps, request());
    const second = request();
    const err = await failure(runChatRequest(deps, second));
    expect(err).toBeInstanceOf(GateRejected);
    expect((err as Error).message).toContain("chat completions");
    expect(await row(second.requestId)).toBeNull();
    release();
    await first;
  });

  test("the deadline: EngineTimeout, the engine's signal aborted; an engine that ignores it keeps its slot until it stops", async () => {
    const { deps, engine, gate, background, request, row } = setup({ timeoutMs: 30 });
    let finish!: () => void;
    engine.behave = () => new Promise((resolve) => (finish = () => resolve(REPLY)));
    const req = request();
    expect(await failure(runChatRequest(deps, req))).toBeInstanceOf(EngineTimeout);
    expect(engine.jobs[0]!.signal.aborted).toBe(true);
    expect(await row(req.requestId)).toMatchObject({ status: "failed", error_code: "EngineTimeout" });
    // The limit stays true: the slot is held while the engine still runs.
    expect(gate.stats().running).toBe(1);
    finish();
    await background.idle();
    expect(gate.stats().running).toBe(0);
  });

  test("a client that leaves: the engine's signal is aborted and the failure is ClientDisconnected", async () => {
    const { deps, engine, request, row } = setup();
    engine.behave = (job) => new Promise((_, reject) => job.signal.addEventListener("abort", () => reject(new Error("aborted by the client"))));
    const client = new AbortController();
    const req = request();
    const running = runChatRequest(deps, req, client.signal);
    await Bun.sleep(1);
    client.abort();
    expect(await failure(running)).toBeInstanceOf(ClientDisconnected);
    expect(await row(req.requestId)).toMatchObject({ status: "failed", error_code: "ClientDisconnected" });
  });

  test("a locked database delays only the history row: the reply comes at once, the row lands once the lock is gone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "atelier-chat-lock-"));
    const store = createStore(openDatabase(dir), latestVersion());
    store.setBusyTimeout(0);
    const { deps, request } = setup({ store });
    // Another process holds the write lock for the whole request.
    const other = new Database(join(dir, "atelier.db"));
    other.exec("BEGIN IMMEDIATE");
    try {
      const req = request();
      const outcome = await runChatRequest(deps, req);
      expect(outcome.result).toEqual(REPLY);
      expect(await store.requests.flushChats()).toBe(false);
      expect(await store.requests.recordOf(req.requestId)).toMatchObject({ status: "succeeded" }); // still queued, not lost
      other.exec("COMMIT");
      expect(await store.requests.get(req.requestId)).toMatchObject({ status: "succeeded" });
      expect(other.query("SELECT COUNT(*) AS n FROM requests").get()).toEqual({ n: 1 });
    } finally {
      other.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
