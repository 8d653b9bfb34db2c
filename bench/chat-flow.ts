/**
 * What the chat flow itself (core/chatRequests.ts runChatRequest: engine lookup, the chat gate,
 * the deadline and the client-signal watch, background tracking, the history row and its
 * batched write) costs per request, beside the same engine called alone, in one process and one
 * run. No HTTP: the engine answers a constant, so the difference is the flow's own CPU.
 *
 *   bun bench/chat-flow.ts [requests=100000] [batch=160] [rounds=3] [--background-checkpoints]
 *
 * 64 clients run requests `batch` at a time, and the history is flushed after each group, so
 * every history batch holds as many rows as one does in a c=64 run through the whole server on
 * the 2-core development machine (about 8000 requests/s × the 20 ms interval), not the 2000 an
 * unpaced loop would queue (a bigger transaction costs more per row).
 *
 * Variants, alternated round by round so load from other processes hits each alike:
 * - engine alone: `await engine.chat(job)` (the floor: the loop and the engine's promise);
 * - flow, no history: runChatRequest with a request log that drops the row;
 * - flow: runChatRequest with the real SQLite store on a file (WAL, as `serve` opens it).
 * Each prints CPU µs per request (process.cpuUsage, user + system) and requests/s. Then the
 * history write itself: the batch transactions seen during the flow runs (count, rows, the
 * longest and the 99th percentile), and a direct measure of one flush per batch size. With
 * --background-checkpoints the store checkpoints its WAL on a worker thread, as `serve` does
 * (store/walCheckpoints.ts); without, in the connection that commits (SQLite's autocheckpoint).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BackgroundWork } from "../src/core/background";
import { runChatRequest, type ChatFlowDeps, type ChatRequest } from "../src/core/chatRequests";
import type { ChatEngine, ChatJob, ChatResult } from "../src/core/engine";
import { LocalGate } from "../src/core/gate";
import { newTimeOrderedId } from "../src/core/ids";
import type { CatalogModel } from "../src/core/models";
import { EngineRegistry } from "../src/engines/registry";
import { createLogger } from "../src/logger";
import { createStore } from "../src/store";
import { latestVersion, openDatabase } from "../src/store/database";
import type { SqlQueries } from "../src/store/sql";

const args = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const backgroundCheckpoints = process.argv.includes("--background-checkpoints");
const total = Math.min(1_000_000, Number(args[0] ?? 100_000));
const batch = Math.max(1, Math.min(2000, Number(args[1] ?? 160)));
const concurrency = 64;
const rounds = Math.min(10, Number(args[2] ?? 3));

const MODEL: CatalogModel = { id: "bench-chat", kind: "chat", ownedBy: "bench", created: 0, source: { kind: "upstream", upstreamId: "bench" }, upstreamModel: "bench-chat", params: {}, price: 0 };
const REPLY: ChatResult = { content: "A red stainless kettle, 1.7 litres.", finishReason: "stop", usage: { promptTokens: 12, completionTokens: 9 } };
const engine: ChatEngine = { chat: (_job: ChatJob) => Promise.resolve(REPLY) };
const engines = new EngineRegistry();
engines.registerUpstreamChat("bench", engine);

const dir = mkdtempSync(join(tmpdir(), "atelier-chat-flow-"));
const store = createStore(openDatabase(dir), latestVersion());
const db = (store.sql as unknown as { db: import("bun:sqlite").Database }).db;
if (backgroundCheckpoints) store.checkpointInBackground((m) => console.error(m));
const userId = db.query<{ id: number }, []>("INSERT INTO users (email, role, credits, created_at) VALUES ('bench@example.test', 'user', 0, 0) RETURNING id").get()!.id;
const keyId = db
  .query<{ id: number }, [number]>("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (?, 'bench', 'sk-atl-bench', 'h', 0) RETURNING id")
  .get(userId)!.id;

/** Parameters per row of the store's chat INSERT (store/requests.ts): rows in a statement = its parameters / this. */
const CHAT_ROW_PARAMS = 20;
// The batch transactions, timed from the outside (the store calls sql.transaction at call time).
const flushes: { ms: number; rows: number }[] = [];
let rowsInTx = 0;
const transaction = store.sql.transaction.bind(store.sql);
store.sql.transaction = async <T>(fn: (tx: SqlQueries) => Promise<T>): Promise<T> => {
  const t0 = performance.now();
  rowsInTx = 0;
  const counting: (tx: SqlQueries) => Promise<T> = (tx) =>
    fn({ ...tx, dialect: tx.dialect, all: tx.all, get: tx.get, run: (s, p) => ((rowsInTx += s.includes("INSERT INTO requests") ? (p?.length ?? 0) / CHAT_ROW_PARAMS : 0), tx.run(s, p)) });
  try {
    return await transaction(counting);
  } finally {
    if (measuring) flushes.push({ ms: performance.now() - t0, rows: rowsInTx });
  }
};
let measuring = false;

const gate = new LocalGate({ subject: "chat completions", global: 4096, perUser: 4096, queueSize: 0, queueTimeoutMs: 0 });
const background = new BackgroundWork();
const base: Omit<ChatFlowDeps, "store"> = {
  gate,
  engines,
  background,
  logger: createLogger(() => {}),
  clock: Date.now,
  generationTimeoutMs: 300_000,
  describeFailure: (e) => ({ code: "failed", message: String(e) }),
};
const withHistory: ChatFlowDeps = { ...base, store };
const noHistory: ChatFlowDeps = { ...base, store: { requests: { ...store.requests, recordChat: () => {} } as unknown as typeof store.requests } };

const controller = new AbortController();
// As the chat route passes it: a getter, read only by a request that runs long.
const clientSignal = () => controller.signal;

function request(): ChatRequest {
  return {
    requestId: newTimeOrderedId("req_"),
    userId,
    keyId,
    model: MODEL,
    messages: [{ role: "user", content: "Rewrite: Red kettle 1.7L stainless" }],
    params: {},
    historyPrompt: "Rewrite: Red kettle 1.7L stainless",
  };
}

type Variant = { name: string; one: () => Promise<unknown> };
const variants: Variant[] = [
  { name: "engine alone", one: () => { const r = request(); return engine.chat({ model: r.model, messages: r.messages, params: r.params, signal: controller.signal }); } },
  { name: "flow, no history", one: () => runChatRequest(noHistory, request(), clientSignal) },
  { name: "flow", one: () => runChatRequest(withHistory, request(), clientSignal) },
];

async function measure(v: Variant, n: number): Promise<{ cpuUs: number }> {
  let left = 0;
  const worker = async () => {
    while (left-- > 0) await v.one();
  };
  Bun.gc(true);
  const cpu0 = process.cpuUsage();
  for (let done = 0; done < n; done += batch) {
    left = Math.min(batch, n - done);
    await Promise.all(Array.from({ length: concurrency }, worker));
    // The rows' write belongs to the requests that queued them: one history batch per group.
    await store.requests.flushChats();
  }
  await background.idle();
  const cpu = process.cpuUsage(cpu0);
  return { cpuUs: (cpu.user + cpu.system) / n };
}

// Warm-up (JIT, the table's first pages).
for (const v of variants) await measure(v, Math.min(total, 20_000));

const results = new Map<string, { cpuUs: number }[]>(variants.map((v) => [v.name, []]));
measuring = true;
for (let r = 0; r < rounds; r++) for (const v of variants) results.get(v.name)!.push(await measure(v, total));
measuring = false;

const fmt = (xs: number[], d = 1) => xs.map((x) => x.toFixed(d)).join(" / ");
console.log(
  `chat flow, ${total} requests × ${rounds} rounds, ${concurrency} clients, history written every ${batch} requests, WAL checkpoints ${backgroundCheckpoints ? "on a worker thread" : "in the committing connection"} (one process; CPU µs per request, user + system)`,
);
const floor = results.get("engine alone")!;
for (const v of variants) {
  const rs = results.get(v.name)!;
  const over = rs.map((x, i) => x.cpuUs - floor[i]!.cpuUs);
  console.log(`  ${v.name.padEnd(18)} ${fmt(rs.map((x) => x.cpuUs))} µs   (+${fmt(over)} over the engine alone)`);
}

const sorted = flushes.map((f) => f.ms).sort((a, b) => a - b);
const rows = flushes.reduce((s, f) => s + f.rows, 0);
if (sorted.length) {
  const p = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  console.log(`history batches during the flow runs: ${sorted.length} transactions, ${rows} rows (${(rows / sorted.length).toFixed(0)} per batch), ` +
    `time per transaction p50 ${p(0.5).toFixed(2)} ms, p99 ${p(0.99).toFixed(2)} ms, max ${sorted.at(-1)!.toFixed(2)} ms; ${((sorted.reduce((s, x) => s + x, 0) * 1000) / rows).toFixed(2)} µs per row`);
}

// One flush of N queued rows, timed directly (wall time on the main thread).
for (const n of [1, 150, 2000]) {
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    for (let k = 0; k < n; k++) store.requests.recordChat({ id: newTimeOrderedId("req_"), userId, keyId, model: MODEL.id, prompt: "Rewrite: Red kettle", status: "succeeded", promptTokens: 12, completionTokens: 9, queueMs: 0, generationMs: 3 }, Date.now());
    const t0 = performance.now();
    await store.requests.flushChats();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  console.log(`  flush of ${String(n).padStart(4)} rows: median ${times[10]!.toFixed(3)} ms (${((times[10]! * 1000) / n).toFixed(2)} µs per row), max ${times.at(-1)!.toFixed(3)} ms`);
}
const count = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM requests").get()!.n;
console.log(`  rows in the table at the end: ${count}`);

await store.close();
rmSync(dir, { recursive: true, force: true });
