/**
 * What `atelier migrate-store` costs: time and the copying process's peak memory, side by side
 * with a baseline in the same run, into a real PostgreSQL on loopback (test/support/postgresServer).
 *   bun bench/migrate-store.ts [users=1000] [blobMiB=128]
 *
 * - rows: `users` users, each with 10 ledger rows and 10 chat requests; batches of 500 rows
 *   (the default) beside one INSERT per row (the baseline).
 * - blobs: `blobMiB` queued task inputs of 1 MiB each; batches bounded at 8 MiB (the default)
 *   beside one INSERT holding every row (the unbounded baseline), to show that memory stays
 *   flat while the data grows (half the blobs, then all of them).
 * Each copy runs in its own process (`--copy`), so its peak RSS (sampled every 5 ms) is its own.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { copyDatabaseFileToPostgres, type CopyOptions } from "../src/store/copyToPostgres";
import { databasePath, openDatabase } from "../src/store/database";
import { openPostgres } from "../src/store/postgresDatabase";
import { startPostgres } from "../test/support/postgresServer";

if (process.argv[2] === "--copy") {
  // The child: one copy, then {ms, rows, peakMiB} on stdout.
  const [, , , file, url, rows, bytes] = process.argv;
  let peak = process.memoryUsage().rss;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
  const target = await openPostgres(url!, { max: 1 });
  const opts: CopyOptions = { batchRows: Number(rows), batchBytes: Number(bytes) };
  const start = performance.now();
  const report = await copyDatabaseFileToPostgres(file!, target, opts);
  const ms = performance.now() - start;
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage().rss);
  await target.close();
  console.log(JSON.stringify({ ms, rows: report.tables.reduce((n, t) => n + t.rows, 0), peakMiB: peak / 2 ** 20 }));
  process.exit(0);
}

const users = Math.min(20_000, Number(process.argv[2] ?? 1000));
const blobMiB = Math.min(512, Number(process.argv[3] ?? 128));
const MiB = 2 ** 20;

function rowsDatabase(dir: string): string {
  const db = openDatabase(dir);
  const now = Date.now();
  db.transaction(() => {
    for (let u = 1; u <= users; u++) {
      db.query("INSERT INTO users (id, email, credits, created_at) VALUES (?, ?, 10, ?)").run(u, `user${u}@example.com`, now);
      for (let i = 0; i < 10; i++) {
        db.query("INSERT INTO ledger (user_id, kind, amount, note, created_at) VALUES (?, 'grant', 1, 'bench', ?)").run(u, now + i);
        db.query(
          "INSERT INTO requests (id, user_id, kind, endpoint, model, status, prompt, prompt_tokens, completion_tokens, created_at, finished_at) VALUES (?, ?, 'chat', 'chat.completions', 'builtin-chat', 'succeeded', 'a short prompt of a few words', 12, 40, ?, ?)",
        ).run(`chat-${u}-${i}`, u, now + i, now + i + 5);
      }
    }
  }).immediate();
  db.close();
  return databasePath(dir);
}

function blobsDatabase(dir: string, count: number): string {
  const db = openDatabase(dir);
  const now = Date.now();
  const bytes = new Uint8Array(MiB).map((_, i) => (i * 31) & 0xff);
  db.transaction(() => {
    db.query("INSERT INTO users (id, email, credits, created_at) VALUES (1, 'bench@example.com', 0, ?)").run(now);
    db.query("INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES ('task-1', 1, 'image', 'images.edits', 'builtin-image', 'pending', ?)").run(now);
    db.query("INSERT INTO tasks (id, user_id, mode, status, endpoint, model, created_at) VALUES ('task-1', 1, 'async', 'queued', 'edits', 'builtin-image', ?)").run(now);
    for (let i = 0; i < count; i++) {
      bytes[0] = i & 0xff;
      db.query("INSERT INTO task_inputs (task_id, position, role, param, mime, width, height, bytes) VALUES ('task-1', ?, 'image', 'image', 'image/png', 512, 512, ?)").run(i, bytes);
    }
  }).immediate();
  db.close();
  return databasePath(dir);
}

async function copyInChild(file: string, batchRows: number, batchBytes: number): Promise<{ ms: number; rows: number; peakMiB: number }> {
  const pg = await startPostgres();
  try {
    const child = Bun.spawn([process.execPath, import.meta.path, "--copy", file, pg.url, String(batchRows), String(batchBytes)], { stdout: "pipe", stderr: "inherit" });
    const [out, code] = await Promise.all([new Response(child.stdout).text(), child.exited]);
    if (code !== 0) throw new Error(`the copy exited ${code}`);
    return JSON.parse(out.trim().split("\n").at(-1)!);
  } finally {
    await pg.stop();
  }
}

const scratch = mkdtempSync(join(tmpdir(), "atelier-bench-migrate-"));
try {
  const rowsFile = rowsDatabase(join(scratch, "rows"));
  const halfFile = blobsDatabase(join(scratch, "half"), Math.max(1, Math.floor(blobMiB / 2)));
  const fullFile = blobsDatabase(join(scratch, "full"), blobMiB);
  const batched = await copyInChild(rowsFile, 500, 8 * MiB);
  const perRow = await copyInChild(rowsFile, 1, 8 * MiB);
  const half = await copyInChild(halfFile, 500, 8 * MiB);
  const full = await copyInChild(fullFile, 500, 8 * MiB);
  const unbounded = await copyInChild(fullFile, 1_000_000, Number.MAX_SAFE_INTEGER);

  const line = (cells: string[]) => console.log(cells[0]!.padEnd(50) + cells.slice(1).map((c) => c.padStart(12)).join(""));
  console.log(`users=${users} (${batched.rows} rows), blobs: ${Math.floor(blobMiB / 2)} and ${blobMiB} × 1 MiB`);
  line(["copy", "seconds", "rows/s", "MiB/s", "peak RSS"]);
  const row = (name: string, r: { ms: number; rows: number; peakMiB: number }, mib?: number) =>
    line([name, (r.ms / 1000).toFixed(2), (r.rows / (r.ms / 1000)).toFixed(0), mib === undefined ? "-" : (mib / (r.ms / 1000)).toFixed(1), `${r.peakMiB.toFixed(0)} MiB`]);
  row("rows, batches of 500 (default)", batched);
  row("rows, one INSERT per row (baseline)", perRow);
  row(`${Math.floor(blobMiB / 2)} MiB of blobs, batches ≤ 8 MiB (default)`, half, Math.floor(blobMiB / 2));
  row(`${blobMiB} MiB of blobs, batches ≤ 8 MiB (default)`, full, blobMiB);
  row(`${blobMiB} MiB of blobs, one INSERT (unbounded baseline)`, unbounded, blobMiB);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
process.exit(0);
