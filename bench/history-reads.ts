/**
 * What a long chat history costs the reads over it, before and after this pass's migrations,
 * side by side in one run (SQLite files in a temp dir, as in data_dir):
 * - an image charge for a key with a credit cap (the real CreditStore.chargeForImage, which sums
 *   the key's spend inside its write transaction: every other write of the server waits for it),
 *   at migration 14 and at this tree's schema (migration 15: spend indexes of image rows only);
 * - the admin's user list's spend of one user (RequestStore.spentByUsers), the same two;
 * - the usage report (GET /v1/usage, the dashboard): the live aggregation over every row of the
 *   range that it ran before migration 16 (its SQL, kept here) against UsageStore today (image
 *   rows live, chat from chat_usage), on the same database, for each grouping.
 *
 *   bun bench/history-reads.ts [chat rows=1000000] [charges=200]
 *
 * Both databases hold the same rows: `chat rows` chat requests of one key over the last 30 days
 * (what a busy chat client leaves in a month) and a few image requests. Prints medians and p99s,
 * and checks that both schemas give the same spend and both reports the same counts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore, type Store } from "../src/store";
import { latestVersion, openDatabase } from "../src/store/database";
import { migrations } from "../src/store/migrations";
import type { UsageGroup, UsageRange } from "../src/core/usage";
import { DAY_MS, utcDay } from "../src/core/utcDays";
import { median } from "./support/chatBench";

const chatRows = Math.max(1, Math.min(5_000_000, Number(process.argv[2] ?? 1_000_000)));
const charges = Math.max(10, Math.min(10_000, Number(process.argv[3] ?? 200)));
const IMAGE_ROWS = 20;
const NOW = Date.now();
const RANGE: UsageRange = (() => {
  const toMs = (Math.floor(NOW / DAY_MS) + 1) * DAY_MS;
  const fromMs = toMs - 30 * DAY_MS;
  return { from: utcDay(fromMs), to: utcDay(toMs - DAY_MS), fromMs, toMs };
})();

/**
 * A database with one user, one capped key, its chat rows over the last 30 days and a few image
 * rows, written at migration 14 and then brought to `version` (as an upgraded server's would be).
 */
function seeded(dir: string, version: number): void {
  const db = openDatabase(dir, migrations.filter((m) => m.version <= 14));
  db.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('spend@example.com', NULL, ?, 0)", [charges + 1000]);
  db.run("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at, credit_cap) VALUES (1, 'capped', 'sk-atl-spnd', 'h', 0, ?)", [charges + 1000]);
  // Time-ordered ids and times, as the server writes them.
  db.run(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
     INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, prompt, created_at, finished_at)
     SELECT printf('req_%012d', i), 1, 1, 'chat', '/v1/chat/completions', 'mock-chat', 'succeeded', 'Rewrite: Red kettle 1.7L stainless', ? + i * ?, ? + i * ? FROM n`,
    [chatRows, RANGE.fromMs, Math.floor((NOW - RANGE.fromMs) / chatRows), RANGE.fromMs, Math.floor((NOW - RANGE.fromMs) / chatRows)],
  );
  for (let i = 0; i < IMAGE_ROWS; i++) {
    db.run("INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, created_at) VALUES (?, 1, 1, 'image', '/v1/images/generations', 'm', 'succeeded', 1, ?)", [
      `req_img_${i}`, NOW - i,
    ]);
  }
  db.close();
  openDatabase(dir, migrations.filter((m) => m.version <= version)).close();
}

/** The usage report's query before migration 16: every row of the range, aggregated live. */
function liveReportSql(groupBy: UsageGroup): { sql: string; params: number[] } {
  const counts = `CAST(COUNT(*) AS BIGINT) AS requests, CAST(COUNT(*) FILTER (WHERE r.kind = 'image') AS BIGINT) AS image_requests,
    CAST(COUNT(*) FILTER (WHERE r.kind = 'image' AND r.status = 'succeeded') AS BIGINT) AS images, CAST(COUNT(*) FILTER (WHERE r.kind = 'chat') AS BIGINT) AS chat_requests,
    CAST(COUNT(*) FILTER (WHERE r.status = 'succeeded') AS BIGINT) AS succeeded, CAST(COUNT(*) FILTER (WHERE r.status IN ('failed', 'interrupted')) AS BIGINT) AS failed,
    CAST(COUNT(*) FILTER (WHERE r.status = 'pending') AS BIGINT) AS pending, CAST(SUM(r.credits_charged) AS BIGINT) AS credits_charged,
    CAST(SUM(r.credits_refunded) AS BIGINT) AS credits_refunded, CAST(SUM(r.credits_charged - r.credits_refunded) AS BIGINT) AS credits_spent`;
  const where = "WHERE r.user_id = ? AND r.created_at >= ? AND r.created_at < ?";
  if (groupBy === "day") return { sql: `SELECT CAST((r.created_at - ?) / ${DAY_MS} AS INTEGER) AS grp, ${counts} FROM requests r ${where} GROUP BY grp`, params: [RANGE.fromMs, 1, RANGE.fromMs, RANGE.toMs] };
  if (groupBy === "model") return { sql: `SELECT r.model AS grp, ${counts} FROM requests r ${where} GROUP BY r.model`, params: [1, RANGE.fromMs, RANGE.toMs] };
  return {
    sql: `SELECT COALESCE(k.prefix, 'workbench') AS grp, ${counts} FROM requests r LEFT JOIN api_keys k ON k.id = r.key_id ${where} GROUP BY r.key_id, k.prefix, k.name`,
    params: [1, RANGE.fromMs, RANGE.toMs],
  };
}

interface Figures {
  chargeMs: number[];
  userSpendMs: number[];
  spent: number;
}

async function measureSpend(store: Store): Promise<Figures> {
  const chargeMs: number[] = [];
  const userSpendMs: number[] = [];
  for (let i = 0; i < charges; i++) {
    const started = performance.now();
    await store.credits.chargeForImage({ requestId: `req_bench_${i}`, userId: 1, keyId: 1, kind: "generate", model: "m", price: 1, prompt: "p" }, NOW + i);
    chargeMs.push(performance.now() - started);
  }
  for (let i = 0; i < Math.min(charges, 50); i++) {
    const started = performance.now();
    await store.requests.spentByUsers([1]);
    userSpendMs.push(performance.now() - started);
  }
  return { chargeMs, userSpendMs, spent: await store.keys.spent(1) };
}

const p99 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))]!;
const timed = async <T>(n: number, f: () => Promise<T> | T): Promise<{ ms: number; value: T }> => {
  const times: number[] = [];
  let value!: T;
  for (let i = 0; i < n; i++) {
    const started = performance.now();
    value = await f();
    times.push(performance.now() - started);
  }
  return { ms: median(times), value };
};
const dir = mkdtempSync(join(tmpdir(), "atelier-history-reads-"));
try {
  const results: [string, Figures][] = [];
  let latest: Store | undefined;
  for (const [name, version] of [["migration 14 (before)", 14], [`migration ${latestVersion()} (this tree)`, latestVersion()]] as const) {
    const path = join(dir, String(version));
    seeded(path, version);
    // Kept at its version (the latest binary would migrate the old file).
    const store = createStore(openDatabase(path, migrations.filter((m) => m.version <= version)), version);
    results.push([name, await measureSpend(store)]);
    if (version === latestVersion()) latest = store;
    else await store.close();
  }
  console.log(`${chatRows} chat rows over the last 30 days and ${IMAGE_ROWS} image rows on one capped key; ${charges} image charges, each its own transaction:`);
  console.log("schema                      charge p50 ms  charge p99 ms  user spend p50 ms  key spent");
  for (const [name, f] of results) {
    console.log(`${name.padEnd(28)}${median(f.chargeMs).toFixed(3).padStart(13)}${p99(f.chargeMs).toFixed(3).padStart(15)}${median(f.userSpendMs).toFixed(3).padStart(19)}${String(f.spent).padStart(11)}`);
  }
  const [before, after] = results.map(([, f]) => f);
  if (before!.spent !== after!.spent || after!.spent !== IMAGE_ROWS + charges) throw new Error(`the spends differ: ${before!.spent} and ${after!.spent}, expected ${IMAGE_ROWS + charges}`);
  console.log(`charge: ${(median(before!.chargeMs) / median(after!.chargeMs)).toFixed(0)}× faster; user spend: ${(median(before!.userSpendMs) / median(after!.userSpendMs)).toFixed(0)}× faster; spends equal (checked)`);

  // The usage report for the last 30 days, on the latest database: its query before migration 16 and today's.
  const store = latest!;
  console.log("\nusage report of the last 30 days (median of 5)   live over every row (before 16)   today   requests counted");
  for (const groupBy of ["day", "model", "key"] as const) {
    const { sql, params } = liveReportSql(groupBy);
    const old = await timed(5, async () => (await store.sql.all<{ requests: number }>(sql, params)).reduce((n, r) => n + r.requests, 0));
    const now = await timed(5, async () => (await store.usage.usage(1, RANGE, groupBy)).reduce((n, r) => n + r.requests, 0));
    if (old.value !== now.value) throw new Error(`group_by=${groupBy}: ${old.value} requests live, ${now.value} from today's report`);
    console.log(`  group_by=${groupBy.padEnd(6)}${old.ms.toFixed(1).padStart(40)} ms${now.ms.toFixed(2).padStart(11)} ms${String(now.value).padStart(12)} (equal, checked)`);
  }
  await store.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
