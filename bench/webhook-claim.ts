/**
 * What one webhook claim (store/webhooks claimDue, the delivery worker's read of what to send
 * next) costs as the backlog of due deliveries grows, before and after migration 21, side by
 * side in one run: N due pending deliveries spread over 1 user (one receiver that is down or
 * hangs, its task events piling up) and over 1000 users, one claim of `limit` 16 with 4 a user,
 * the first user already holding one attempt in flight (`held`). Three figures on the same rows:
 * - before: the claim's query before migration 21 (store/webhooks rankedClaim, which the store
 *   still runs for a few due rows) on a database at
 *   migration 20 (the schema before the index): a window function over every due row;
 * - old query + index: the same query at this tree's schema (the index alone does not help:
 *   the window still reads every due row, in the index's order instead of a sort);
 * - now: WebhookStore.claimDue at this tree's schema.
 * On SQLite (files in a temp dir, as in data_dir), where the claim runs on the serving thread and
 * every request waits for it, and on PostgreSQL when its binaries are here (a throwaway cluster
 * from test/support/postgresServer, loopback, fsync off).
 *
 *   bun bench/webhook-claim.ts [claims per figure=20] [--sqlite-only]
 *
 * Today's claim costs about the users with pending deliveries (a seek each, and up to 4 of
 * their oldest due rows), so with 1000 users and one row each it costs more than the window did;
 * the 1000-user rows show how much.
 *
 * Each claim leases its rows (next_attempt_at moves to the lease); the bench puts them back
 * before the next one, so every claim sees the same backlog. Prints the median and p99 ms of a
 * claim, and checks that all three take the same rows. Bounded: at most 100 000 rows a database,
 * two databases at a time.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../src/store/database";
import { migrations } from "../src/store/migrations";
import { openPostgres } from "../src/store/postgresDatabase";
import { postgresMigrations } from "../src/store/postgresMigrations";
import { SqliteClient, type SqlClient } from "../src/store/sql";
import { rankedClaim, WebhookStore } from "../src/store/webhooks";
import { postgresBinDir, startPostgres, type TestPostgres } from "../test/support/postgresServer";
import { median } from "./support/chatBench";

const claims = Math.max(3, Math.min(1000, Number(process.argv.find((a, i) => i >= 2 && /^\d+$/.test(a)) ?? 20)));
const sqliteOnly = process.argv.includes("--sqlite-only");
const BACKLOGS = [1_000, 10_000, 100_000];
const USERS = [1, 1000];
const LIMIT = 16;
const PER_USER = 4;
const NOW = 1_700_000_000_000;
const LEASE = NOW + 60_000;
const BEFORE = 20;

/** `users` users and `rows` due pending deliveries dealt round the users, the oldest first. */
async function seed(sql: SqlClient, users: number, rows: number): Promise<void> {
  await sql.run(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
     INSERT INTO users (email, password_hash, role, credits, created_at) SELECT 'bench' || i || '@example.test', NULL, 'user', 0, 0 FROM n`,
    [users],
  );
  // Due since a time before NOW; next_attempt_at = created_at, so a claim's lease is undone by copying it back.
  await sql.run(
    `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
     INSERT INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, attempts, next_attempt_at, created_at)
     SELECT 'msg_' || i, 1 + i % ?, 'image.task.succeeded', 'request', 'https://hooks.example.test/', '{}', 'pending', 0, ? + i, ? + i FROM n`,
    [rows, users, NOW - 10 * rows, NOW - 10 * rows],
  );
  // As a running PostgreSQL's autovacuum would have; SQLite as the server runs it, without statistics.
  if (sql.dialect === "postgres") await sql.run("ANALYZE webhook_deliveries");
}

type Claim = (sql: SqlClient) => Promise<{ id: number }[]>;

/** Median and p99 ms of `claims` claims, each undone before the next; the ids of the first. */
async function measure(sql: SqlClient, claim: Claim, expected: number): Promise<{ p50: number; p99: number; ids: string }> {
  const times: number[] = [];
  let ids = "";
  for (let i = 0; i < claims + 2; i++) {
    const started = performance.now();
    const rows = await claim(sql);
    const ms = performance.now() - started;
    if (i >= 2) times.push(ms); // the first two warm the statement cache and the pages
    if (i === 0) ids = rows.map((r) => r.id).sort((a, b) => a - b).join(",");
    if (rows.length !== expected) throw new Error(`a claim took ${rows.length} rows, not ${expected}`);
    await sql.run(`UPDATE webhook_deliveries SET next_attempt_at = created_at WHERE id IN (${rows.map(() => "?").join(", ")})`, rows.map((r) => r.id));
  }
  const sorted = [...times].sort((a, b) => a - b);
  return { p50: median(times), p99: sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!, ids };
}

const held = new Map([[1, 1]]);
/** What a claim takes: up to PER_USER a user less what they hold, LIMIT in all. */
const expectedRows = (users: number) => Math.min(LIMIT, PER_USER * users - (held.get(1) ?? 0));

/** The claim before migration 21: a window over every due row (what the store still runs for a few due rows). */
const before: Claim = (sql) => rankedClaim(sql, NOW, LIMIT, LEASE, PER_USER, held);
const now: Claim = (sql) => new WebhookStore(sql).claimDue(NOW, LIMIT, LEASE, PER_USER, held);

function postgresHere(): boolean {
  try {
    postgresBinDir();
    return true;
  } catch {
    return process.env.ATELIER_TEST_POSTGRES_URL !== undefined;
  }
}

interface Opened {
  old: SqlClient;
  latest: SqlClient;
  close(): Promise<void>;
}

/** Two fresh databases on `engine`: at migration 20 and at this tree's schema. */
async function open(engine: "SQLite" | "PostgreSQL", dir: string, name: string): Promise<Opened> {
  if (engine === "SQLite") {
    const old = new SqliteClient(openDatabase(join(dir, `${name}-old`), migrations.filter((m) => m.version <= BEFORE)));
    const latest = new SqliteClient(openDatabase(join(dir, `${name}-latest`)));
    return { old, latest, close: async () => (await old.close(), await latest.close()) };
  }
  const pgs: TestPostgres[] = [await startPostgres(), await startPostgres({ migrated: true })];
  const old = await openPostgres(pgs[0]!.url, { max: 2 }, postgresMigrations.filter((m) => m.version <= BEFORE));
  return {
    old,
    latest: pgs[1]!.client(),
    async close() {
      await old.close();
      for (const pg of pgs) await pg.stop();
    },
  };
}

const engines: ("SQLite" | "PostgreSQL")[] = sqliteOnly || !postgresHere() ? ["SQLite"] : ["SQLite", "PostgreSQL"];
const dir = mkdtempSync(join(tmpdir(), "atelier-bench-webhook-claim-"));
const ratio = (r: number) => (r < 10 ? r.toFixed(1) : r.toFixed(0));
const cell = (f: { p50: number; p99: number }) => `${f.p50.toFixed(2)} (${f.p99.toFixed(2)})`.padStart(22);
console.log(`one claim: limit ${LIMIT}, ${PER_USER} a user, user 1 holding 1; median (p99) ms of ${claims} claims (bun ${Bun.version}, ${navigator.hardwareConcurrency} cores)`);
console.log(`engine      due rows  users${"before (migration 20)".padStart(22)}${"old query + index".padStart(22)}${"now".padStart(22)}  before/now`);
try {
  for (const engine of engines) {
    for (const users of USERS) {
      for (const rows of BACKLOGS) {
        const db = await open(engine, dir, `${users}-${rows}`);
        try {
          await seed(db.old, users, rows);
          await seed(db.latest, users, rows);
          const expected = expectedRows(users);
          const was = await measure(db.old, before, expected);
          const indexOnly = await measure(db.latest, before, expected);
          const is = await measure(db.latest, now, expected);
          if (was.ids !== is.ids || indexOnly.ids !== is.ids) throw new Error(`the claims took different rows: ${was.ids} / ${indexOnly.ids} / ${is.ids}`);
          console.log(`${engine.padEnd(10)}${String(rows).padStart(10)}${String(users).padStart(7)}${cell(was)}${cell(indexOnly)}${cell(is)}${`${ratio(was.p50 / is.p50)}×`.padStart(12)}`);
        } finally {
          await db.close();
        }
      }
    }
  }
  console.log("(the same rows taken by all three, checked)");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
