/**
 * What the account pool costs per request, and what an upstream round trip through the
 * OpenAI engine costs on loopback. Prints figures; asserts nothing.
 *   bun bench/upstreamPool.ts [requests]
 *
 * 1. pool.run with an attempt that returns at once, store on a real SQLite file in WAL mode:
 *    the overhead of picking (including the disabled-flag query on every pick) and releasing.
 * 2. The same with 64 requests in flight over 4 accounts of capacity 4 (waiting included).
 * 3. OpenAIEngine.generate against a fake OpenAI server on loopback (64x64 PNG answers).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../src/config";
import { ModelCatalog } from "../src/core/models";
import { AccountPool } from "../src/engines/pool";
import { EngineRegistry } from "../src/engines/registry";
import { registerUpstreamEngines } from "../src/engines/upstreams";
import { createStore } from "../src/store";
import { latestVersion, openDatabase } from "../src/store/database";
import { startFakeOpenAI } from "../test/support/fakeUpstreams";

const N = Number(process.argv[2] ?? 20000);
const dir = mkdtempSync(join(tmpdir(), "atelier-bench-pool-"));
const store = createStore(openDatabase(dir), latestVersion());
const settings = {
  attemptTimeoutMs: 10_000,
  maxAttempts: 3,
  deadlineMs: 60_000,
  queueTimeoutMs: 60_000,
  rateLimitCooldownMaxMs: 60_000,
  failureThreshold: 3,
  failureCooldownMs: 5000,
  failureCooldownMaxMs: 300_000,
};
const accounts = ["a", "b", "c", "d"].map((id, i) => ({ id, weight: i + 1, maxConcurrency: 4 }));

function report(label: string, n: number, ms: number) {
  console.log(`${label.padEnd(58)} ${n} requests in ${ms.toFixed(0)} ms = ${((ms * 1000) / n).toFixed(1)} µs/request`);
}

const pool = new AccountPool("bench", accounts, settings, store.upstreams, Date.now);
for (let i = 0; i < 500; i++) await pool.run(async () => 1); // warm-up
let t = performance.now();
for (let i = 0; i < N; i++) await pool.run(async () => 1);
report("pool.run, sequential, no-op attempt", N, performance.now() - t);

t = performance.now();
let next = 0;
await Promise.all(
  Array.from({ length: 64 }, async () => {
    while (next++ < N) await pool.run(async () => await Promise.resolve(1));
  }),
);
report("pool.run, 64 in flight over capacity 16, no-op attempt", N, performance.now() - t);
pool.close();

const fake = startFakeOpenAI();
const config = loadConfig({ env: {} });
config.upstreams.push({
  id: "oa",
  kind: "openai",
  base_url: `${fake.url}/v1`,
  timeout_ms: 10_000,
  max_attempts: 3,
  rate_limit_cooldown_max_ms: 60_000,
  failure_threshold: 3,
  failure_cooldown_ms: 5000,
  failure_cooldown_max_ms: 300_000,
  max_download_bytes: 64 * 1024 * 1024,
  download_timeout_ms: 30_000,
  accounts: [{ id: "k", api_key: "sk-bench-000000000000", weight: 1, max_concurrency: 8 }],
});
config.models.push({ id: "pic", kind: "image", upstream: "oa" });
const registry = new EngineRegistry();
registerUpstreamEngines(config, registry, { store: store.upstreams, clock: Date.now });
const model = new ModelCatalog(config).get("pic")!;
const engine = registry.imageEngine(model)!;
const job = () => ({ model, prompt: "bench", size: { width: 64, height: 64 }, quality: "auto", images: [], extra: {}, signal: new AbortController().signal });
const M = Math.max(200, Math.round(N / 50));
for (let i = 0; i < 20; i++) await engine.generate(job());
t = performance.now();
for (let i = 0; i < M; i++) await engine.generate(job());
report("OpenAIEngine.generate via loopback fake, sequential", M, performance.now() - t);
t = performance.now();
await Promise.all(Array.from({ length: M }, () => engine.generate(job())));
report("OpenAIEngine.generate via loopback fake, all at once (cap 8)", M, performance.now() - t);

await fake.stop();
await store.close();
rmSync(dir, { recursive: true, force: true });
