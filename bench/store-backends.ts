/**
 * The two backends side by side in one run, on this machine, loopback only:
 * - charge + refund (the real CreditStore.chargeForImage and refundOnce, each its own transaction
 *   with its ledger row) on SQLite (a file in a temp dir, as in data_dir) and on PostgreSQL (a real
 *   server started by test/support/postgresServer: fsync off, so the figure is the engine's and
 *   the round trips', not the disk's);
 * - the generation gate's admit + release on LocalGate (memory) and RedisGate (a real
 *   redis-server from test/support/redisServer).
 *   bun bench/store-backends.ts [count=2000] [concurrency=16]
 * Sequential: one pair at a time. Concurrent: `concurrency` workers, each its own user (and, for
 * the store, the same `concurrency` workers all on ONE user, where every charge waits for the
 * previous one's row lock). Bounded: `count` pairs per figure.
 * After the run every balance must equal its ledger and be back where it started (checked).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalGate, type Gate, type GateLimits } from "../src/core/gate";
import { RedisGate } from "../src/core/redisGate";
import { CreditStore } from "../src/store/credits";
import { openDatabase } from "../src/store/database";
import { PostgresClient, SqliteClient, type SqlClient } from "../src/store/sql";
import { UserStore } from "../src/store/users";
import { startPostgres } from "../test/support/postgresServer";
import { startRedis } from "../test/support/redisServer";

const count = Math.max(1, Math.min(50_000, Number(process.argv[2] ?? 2000)));
const concurrency = Math.max(1, Math.min(64, Number(process.argv[3] ?? 16)));
const START_CREDITS = 1_000_000;

let nextRequest = 0;

/** One charge of 1 credit and its refund: two transactions, four ledger-touching statements. */
async function chargeAndRefund(credits: CreditStore, userId: number): Promise<void> {
  const requestId = `bench-${process.pid}-${nextRequest++}`;
  const now = Date.now();
  await credits.chargeForImage({ requestId, userId, keyId: null, kind: "generate", model: "bench", price: 1, prompt: "bench" }, now);
  const refunded = await credits.refundOnce(requestId, { status: "failed", errorCode: "bench", errorMessage: "bench" }, now);
  if (!refunded) throw new Error(`request ${requestId} was not refunded`);
}

interface StoreFigures {
  sequentialPerSecond: number;
  concurrentPerSecond: number;
  oneUserPerSecond: number;
}

async function measureStore(sql: SqlClient): Promise<StoreFigures> {
  const users = new UserStore(sql);
  const ids: number[] = [];
  for (let i = 0; i < concurrency; i++) {
    ids.push((await users.create({ email: `bench${i}@example.com`, passwordHash: null, role: "user", credits: START_CREDITS }, Date.now())).id);
  }
  const credits = new CreditStore(sql);
  for (let i = 0; i < 50; i++) await chargeAndRefund(credits, ids[0]!); // warm statements and pool

  const perSecond = async (workers: number, userOf: (worker: number) => number): Promise<number> => {
    let left = count;
    const start = performance.now();
    await Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        while (left-- > 0) await chargeAndRefund(credits, userOf(w));
      }),
    );
    return count / ((performance.now() - start) / 1000);
  };
  const figures = {
    sequentialPerSecond: await perSecond(1, () => ids[0]!),
    concurrentPerSecond: await perSecond(concurrency, (w) => ids[w]!),
    oneUserPerSecond: await perSecond(concurrency, () => ids[0]!),
  };
  const mismatches = await credits.ledgerMismatches();
  if (mismatches !== 0) throw new Error(`${sql.dialect}: ${mismatches} balances differ from their ledger`);
  for (const id of ids) {
    const balance = await credits.balance(id);
    if (balance !== START_CREDITS) throw new Error(`${sql.dialect}: user ${id} ended at ${balance}, not ${START_CREDITS}`);
  }
  return figures;
}

interface GateFigures {
  sequentialMicros: number;
  concurrentPerSecond: number;
}

async function measureGate(gate: Gate): Promise<GateFigures> {
  for (let i = 0; i < 50; i++) (await gate.admit(0)).release(); // warm the connection and the script cache
  let start = performance.now();
  for (let i = 0; i < count; i++) (await gate.admit(0)).release();
  const sequentialMicros = ((performance.now() - start) * 1000) / count;
  let left = count;
  start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, user) => {
      while (left-- > 0) (await gate.admit(user)).release();
    }),
  );
  return { sequentialMicros, concurrentPerSecond: count / ((performance.now() - start) / 1000) };
}

function table(head: string[], rows: string[][]): void {
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(48) : c.padStart(12))).join("");
  console.log(line(head));
  for (const row of rows) console.log(line(row));
}

const dir = mkdtempSync(join(tmpdir(), "atelier-bench-store-"));
const pg = await startPostgres({ migrated: true });
const redis = await startRedis();
try {
  const db = openDatabase(dir);
  const sqlite = await measureStore(new SqliteClient(db));
  db.close();
  const pool = PostgresClient.connect(pg.url, { max: concurrency });
  const postgres = await measureStore(pool);
  await pool.close();

  const limits: GateLimits = { subject: "bench", global: concurrency, perUser: 1, queueSize: 0, queueTimeoutMs: 0 };
  const local = await measureGate(new LocalGate(limits));
  const redisGate = new RedisGate(redis.client(), limits, { keyPrefix: "bench:" });
  const shared = await measureGate(redisGate);
  redisGate.close();

  console.log(`count=${count} concurrency=${concurrency} (bun ${Bun.version}, ${navigator.hardwareConcurrency} cores)`);
  table(
    ["charge+refund pairs per second", "SQLite", "PostgreSQL"],
    [
      ["sequential (1 at a time)", sqlite.sequentialPerSecond.toFixed(0), postgres.sequentialPerSecond.toFixed(0)],
      [`${concurrency} at once, ${concurrency} users`, sqlite.concurrentPerSecond.toFixed(0), postgres.concurrentPerSecond.toFixed(0)],
      [`${concurrency} at once, all on one user`, sqlite.oneUserPerSecond.toFixed(0), postgres.oneUserPerSecond.toFixed(0)],
    ],
  );
  table(
    ["gate admit+release", "LocalGate", "RedisGate"],
    [
      ["sequential, µs per pair", local.sequentialMicros.toFixed(2), shared.sequentialMicros.toFixed(1)],
      [`${concurrency} users at once, pairs per second`, local.concurrentPerSecond.toFixed(0), shared.concurrentPerSecond.toFixed(0)],
    ],
  );
} finally {
  await redis.stop();
  await pg.stop();
  rmSync(dir, { recursive: true, force: true });
}
