/**
 * What the foundation costs per request and at start:
 *  - GET /v1/models through a real listening server (key lookup by hash in SQLite, the throttled
 *    last_used_at, CORS, request id, log line), with request logging on as in production;
 *  - a 404 (no auth, no database) for comparison;
 *  - `bun run build` and the compiled binary's time from exec to "listening".
 *
 *   bun bench/foundation.ts [requests=4000] [concurrency=8]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestServer } from "../test/support/server";
import { REPO, startServerProcess } from "../test/support/process";

const total = Number(process.argv[2] ?? 4000);
const concurrency = Number(process.argv[3] ?? 8);
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

const server = await startTestServer();
const { key } = await server.userWithKey();

async function run(name: string, url: string, headers: Record<string, string>): Promise<void> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < total) {
        const t = performance.now();
        const res = await fetch(url, { headers });
        await res.arrayBuffer();
        latencies.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  console.log(
    `${name.padEnd(22)} ${String(Math.round(latencies.length / seconds)).padStart(6)} req/s   p50 ${pct(latencies, 50).toFixed(2)} ms   p99 ${pct(latencies, 99).toFixed(2)} ms`,
  );
}

console.log(`${total} requests, concurrency ${concurrency}, one server in this process`);
await run("warm-up", `${server.url}/v1/models`, { authorization: `Bearer ${key}` });
await run("GET /v1/models", `${server.url}/v1/models`, { authorization: `Bearer ${key}` });
await run("GET /nowhere (404)", `${server.url}/nowhere`, {});
await server.close();

let t = performance.now();
const build = Bun.spawnSync([process.execPath, "run", "build"], { cwd: REPO, stdout: "ignore", stderr: "pipe" });
if (build.exitCode !== 0) throw new Error(build.stderr.toString());
console.log(`bun run build          ${((performance.now() - t) / 1000).toFixed(2)} s, dist/atelier ${(Bun.file(join(REPO, "dist/atelier")).size / 1024 / 1024).toFixed(0)} MiB`);

const dir = mkdtempSync(join(tmpdir(), "atelier-bench-"));
for (let i = 0; i < 3; i++) {
  t = performance.now();
  const proc = await startServerProcess([join(REPO, "dist/atelier")], ["--port", "0", "--host", "127.0.0.1", "--data", dir]);
  const ms = performance.now() - t;
  const rss = (await Bun.$`ps -o rss= -p ${proc.proc.pid}`.text()).trim();
  console.log(`binary exec→listening  ${ms.toFixed(0)} ms${i === 0 ? " (creates the database)" : ""}, RSS ${(Number(rss) / 1024).toFixed(0)} MiB`);
  await proc.stop();
}
rmSync(dir, { recursive: true, force: true });
