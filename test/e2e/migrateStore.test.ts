/**
 * `atelier migrate-store --to postgres://…` as an operator runs it, against a real PostgreSQL
 * (test/support/postgresServer.ts) and a SQLite deployment made through the real server and CLI:
 * users with passwords, keys, grants, a succeeded (kept) and a refunded image, a chat, an async
 * task with its webhook deliveries, an idempotent request, a workbench session, a redeemed code,
 * a disabled upstream account. After the copy the PostgreSQL rows equal the SQLite rows table by
 * table, balances equal ledgers and the id sequences continue; every refusal (non-empty target,
 * a table the copier does not know, another schema version, a running server, a failing row)
 * leaves the target without a row.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { lockDataDir } from "../../src/cli/serverLock";
import { databasePath } from "../../src/store/database";
import { copyDatabaseInto } from "../../src/store/maintenance";
import { copyDatabaseFileToPostgres } from "../../src/store/copyToPostgres";
import { openPostgres } from "../../src/store/postgresDatabase";
import type { SqlQueries } from "../../src/store/sql";
import { startFakeOpenAI, type FakeOpenAI } from "../support/fakeUpstreams";
import { until } from "../support/until";
import { startPostgres, type TestPostgres } from "../support/postgresServer";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier } from "../support/process";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";

const TIMEOUT_MS = 60_000;
/** The tables makeDeployment puts rows in. */
const FILLED_BY_THE_DEPLOYMENT = [
  "users", "api_keys", "ledger", "requests", "sessions", "tasks", "idempotency_keys",
  "webhook_endpoints", "webhook_deliveries", "webhook_attempts", "images", "server_secrets",
  "redemption_batches", "redemption_codes", "upstream_disabled_accounts", "upstream_pool_snapshot",
];
const PASSWORD = "migrate store password";

let upstream: FakeOpenAI;
let receiver: ReturnType<typeof Bun.serve>;
let dataDir = "";
const scratch: string[] = [];
const databases: TestPostgres[] = [];

const atelier = (dir: string, ...args: string[]) => runAtelier(ATELIER_FROM_SOURCE, [...args, "--data", dir]);

async function freshPostgres(): Promise<TestPostgres> {
  const pg = await startPostgres();
  databases.push(pg);
  return pg;
}

/** The same URL with a password in it (the test cluster trusts loopback, so it is never asked for). */
const withPassword = (url: string, password: string) => url.replace("postgres@", `postgres:${password}@`);

/** Every table of the SQLite schema but the migrations' own bookkeeping. */
function sqliteTables(db: Database): string[] {
  return db
    .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY name")
    .all()
    .map((r) => r.name);
}

/** A row in a form both engines' rows compare equal in: sorted keys, blobs as hex, int8 and booleans as numbers. */
function normalised(row: Record<string, unknown>): string {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(row).sort()) {
    const v = row[key];
    out[key] = v instanceof Uint8Array ? `hex:${Buffer.from(v).toString("hex")}` : typeof v === "bigint" ? Number(v) : typeof v === "boolean" ? Number(v) : v;
  }
  return JSON.stringify(out);
}

const sqliteRows = (db: Database, table: string) => db.query<Record<string, unknown>, []>(`SELECT * FROM "${table}"`).all().map(normalised).sort();
const postgresRows = async (q: SqlQueries, table: string) => (await q.all<Record<string, unknown>>(`SELECT * FROM "${table}"`)).map(normalised).sort();

async function postgresRowCount(q: SqlQueries, tables: string[]): Promise<number> {
  let n = 0;
  for (const t of tables) n += (await q.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM "${t}"`))!.n;
  return n;
}

/** A copy of the deployment's database in a data directory of its own, to change without touching the original. */
function copyOfDeployment(change?: (db: Database) => void): string {
  const dir = tempDir("atelier-migrate-copy-");
  scratch.push(dir);
  copyDatabaseInto(databasePath(dataDir), databasePath(dir));
  const db = new Database(databasePath(dir), { strict: true });
  // WAL, as the server keeps it (VACUUM INTO writes a rollback-journal database).
  db.exec("PRAGMA journal_mode = WAL");
  change?.(db);
  db.close();
  return dir;
}

/**
 * The deployment: a real server on a temporary data directory, used through the API, the
 * workbench and the CLI, then stopped (migrate-store refuses while it runs).
 */
async function makeDeployment(): Promise<void> {
  upstream = startFakeOpenAI();
  const hooks: string[] = [];
  receiver = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      hooks.push(await req.text());
      return new Response("ok");
    },
  });
  // The source of migrate-store is a SQLite deployment, on either pass.
  const server: TestServer = await startTestServer({
    backend: "embedded",
    toml: `
[webhooks]
allow_private_addresses = true
poll_interval_ms = 50

[[upstreams]]
id = "acme"
kind = "openai"
base_url = "${upstream.url}/v1"
[[upstreams.accounts]]
id = "main"
api_key = "sk-upstream-main"

[[models]]
id = "acme/image"
kind = "image"
upstream = "acme"
`,
    config: (c) => void (c.server.log_requests = false),
  });
  dataDir = server.dataDir;
  scratch.push(dataDir);
  try {
    const cli = (...args: string[]) => atelier(dataDir, ...args);
    const json = (key: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

    // Users and keys through the CLI, a grant, and a second user made the test server's way.
    expect((await cli("user", "add", "Alice@Example.com", "--credits", "5", "--password", PASSWORD)).code).toBe(0);
    expect((await cli("credits", "grant", "alice@example.com", "7", "--note", "welcome")).code).toBe(0);
    const created = await cli("key", "create", "alice@example.com", "--name", "laptop");
    expect(created.code).toBe(0);
    const alice = lastLine(created.stdout);
    const bob = await server.userWithKey({ email: "bob@example.com", credits: 3 });

    // A succeeded image (charged, kept in the archive, answered with a link signed by the
    // server's own secret) and a refunded one (the upstream's 401 also disables its account).
    const ok = await json(alice, "/v1/images/generations", { model: "builtin-image", prompt: "a lighthouse", size: "64x64", response_format: "url" });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { data: { url: string }[] }).data[0]!.url).toContain("/images/");
    upstream.queueFaults("sk-upstream-main", { kind: "status", status: 401, message: "bad key" });
    const refused = await json(alice, "/v1/images/generations", { model: "acme/image", prompt: "a lighthouse" });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    await refused.arrayBuffer();

    // A chat, an idempotent image request, and an async task that ends with webhooks.
    const chat = await json(bob.key, "/v1/chat/completions", { model: "builtin-chat", messages: [{ role: "user", content: "hi" }] });
    expect(chat.status).toBe(200);
    const idem = await json(bob.key, "/v1/images/generations", { prompt: "a fox", size: "64x64" }, { "idempotency-key": "fox-1" });
    expect(idem.status).toBe(200);
    const saved = await server.services.taskEvents.endpoints.setUrl(bob.userId, `http://127.0.0.1:${receiver.port}/hook`);
    expect(saved.refused).toBeUndefined();
    const task = await json(bob.key, "/v1/images/generations", { prompt: "a cat", size: "64x64" }, { prefer: "respond-async" });
    expect(task.status).toBe(202);
    const { id: taskId } = (await task.json()) as { id: string };
    await until(() => hooks.some((h) => h.includes(taskId)), "the task's webhook", 10_000);

    // A workbench session, and a redemption code made by the CLI and redeemed by Alice.
    const signIn = await fetch(`${server.url}/signin`, {
      method: "POST",
      redirect: "manual",
      headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ email: "alice@example.com", password: PASSWORD }),
    });
    expect(signIn.status).toBe(303);
    const codes = await cli("codes", "create", "--credits", "4", "--count", "2", "--name", "launch");
    expect(codes.code).toBe(0);
    const code = codes.stdout.trim().split("\n")[1]!.split(",")[0]!;
    const aliceId = (await server.services.store.users.byEmail("alice@example.com"))!.id;
    expect(await server.services.workbench.codes.redeem(aliceId, code, "migrate-test")).toMatchObject({ ok: true, credits: 4 });
    // Let the async task's bookkeeping and the pool snapshot settle before stopping.
    await until(() => hooks.length >= 1, "webhooks", 10_000);
  } finally {
    await server.stop();
    receiver.stop(true);
    await upstream.stop();
  }
}

beforeAll(makeDeployment, TIMEOUT_MS);

afterAll(async () => {
  for (const pg of databases) await pg.stop();
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

describe("a SQLite deployment copied into an empty PostgreSQL database", () => {
  let pg: TestPostgres;
  let tables: string[] = [];

  test(
    "exits 0 with a summary; the PostgreSQL rows equal the SQLite rows, table by table; the password is never printed",
    async () => {
      pg = await freshPostgres();
      const secret = "pw-never-printed-7781";
      const r = await atelier(dataDir, "migrate-store", "--to", withPassword(pg.url, secret));
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(r.stdout + r.stderr).not.toContain(secret);
      expect(r.stdout).toContain(`into PostgreSQL at 127.0.0.1:${new URL(pg.url).port}/${pg.database}`);
      expect(r.stdout).toMatch(/check: \d+ tables, \d+ rows, the same counts as the SQLite database/);
      expect(r.stdout).toContain("check: 2 user balances equal to their ledger");

      const source = new Database(databasePath(dataDir), { readonly: true, strict: true });
      const target = pg.client();
      try {
        tables = sqliteTables(source);
        // The deployment really has rows in every table it was made to fill (task_inputs only
        // holds the images of queued tasks: it is empty once they ran, see the batches test).
        const filled = tables.filter((t) => source.query(`SELECT 1 FROM "${t}" LIMIT 1`).get() !== null);
        expect(filled).toEqual(expect.arrayContaining(FILLED_BY_THE_DEPLOYMENT));
        for (const t of tables) {
          const rows = sqliteRows(source, t);
          expect(r.stdout).toMatch(new RegExp(`^  ${t} +${rows.length} rows?$`, "m"));
          expect({ table: t, rows: await postgresRows(target, t) }).toEqual({ table: t, rows });
        }
        const wrong = await target.all(
          `SELECT u.id FROM users u LEFT JOIN (SELECT user_id, CAST(SUM(amount) AS BIGINT) AS s FROM ledger GROUP BY user_id) l ON l.user_id = u.id
            WHERE u.credits != COALESCE(l.s, 0)`,
        );
        expect(wrong).toEqual([]);
        // 5 + 7 granted, 1 charged for the kept image, 1 charged and refunded, 4 redeemed.
        expect(await target.get("SELECT credits FROM users WHERE lower(email) = 'alice@example.com'")).toEqual({ credits: 15 });
      } finally {
        source.close();
      }
    },
    TIMEOUT_MS,
  );

  test("the id sequences continue after the copied ids", async () => {
    const target = pg.client();
    const maxUser = (await target.get<{ m: number }>("SELECT CAST(MAX(id) AS BIGINT) AS m FROM users"))!.m;
    const maxLedger = (await target.get<{ m: number }>("SELECT CAST(MAX(id) AS BIGINT) AS m FROM ledger"))!.m;
    const user = await target.get<{ id: number }>("INSERT INTO users (email, created_at) VALUES (?, ?) RETURNING id", ["carol@example.com", Date.now()]);
    expect(user!.id).toBe(maxUser + 1);
    const entry = await target.transaction(async (tx) => {
      await tx.run("UPDATE users SET credits = credits + 2 WHERE id = ?", [user!.id]);
      return tx.get<{ id: number }>("INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (?, 'grant', 2, ?) RETURNING id", [user!.id, Date.now()]);
    });
    expect(entry!.id).toBe(maxLedger + 1);
  });

  test(
    "a second run against the now non-empty target (named by ATELIER_DATABASE_URL this time) is refused (exit 1) and changes nothing",
    async () => {
      const target = pg.client();
      const before = await postgresRowCount(target, tables);
      const r = await runAtelier(ATELIER_FROM_SOURCE, ["migrate-store", "--data", dataDir], { env: { ATELIER_DATABASE_URL: pg.url } });
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/the PostgreSQL database is not empty \(rows in [a-z_, ]*\busers\b/);
      expect(await postgresRowCount(target, tables)).toBe(before);
    },
    TIMEOUT_MS,
  );
});

describe("refusals and failures leave the target without a row", () => {
  /** Runs migrate-store from `dir` into a fresh database; returns its result and the rows the target holds after. */
  async function attempt(dir: string, extra: string[] = []) {
    const pg = await freshPostgres();
    const r = await atelier(dir, "migrate-store", "--to", pg.url, ...extra);
    const tables = (await pg.client().all<{ name: string }>("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name != 'schema_migrations'")).map((t) => t.name);
    return { ...r, tables, rows: await postgresRowCount(pg.client(), tables) };
  }

  test(
    "a row PostgreSQL refuses midway (refunded more than charged): exit 1, rolled back, no table holds a row",
    async () => {
      const dir = copyOfDeployment((db) => {
        db.exec("PRAGMA ignore_check_constraints = ON");
        db.exec("UPDATE requests SET credits_refunded = credits_charged + 1 WHERE credits_refunded = 1");
      });
      const r = await attempt(dir);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain("the copy failed and was rolled back, nothing was kept");
      expect(r.stderr).toContain("SQLSTATE 23514");
      // users, keys and more were inserted before requests failed: all of it is gone.
      expect(r.tables.length).toBeGreaterThan(10);
      expect(r.rows).toBe(0);
    },
    TIMEOUT_MS,
  );

  test(
    "a balance that differs from its ledger fails the check: exit 1, nothing kept",
    async () => {
      const dir = copyOfDeployment((db) => db.exec("UPDATE users SET credits = credits + 1 WHERE id = (SELECT MIN(id) FROM users)"));
      const r = await attempt(dir);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/balances differ from their ledgers, nothing was kept[^]*user \d+: balance \d+, ledger \d+/);
      expect(r.rows).toBe(0);
    },
    TIMEOUT_MS,
  );

  test(
    "a table the copier does not know (a future migration's, say) is refused before anything is written",
    async () => {
      const dir = copyOfDeployment((db) => db.exec("CREATE TABLE future_things (id INTEGER PRIMARY KEY, note TEXT) STRICT"));
      const r = await attempt(dir);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain("tables only in the SQLite database, unknown to the copier: future_things");
      expect(r.rows).toBe(0);
    },
    TIMEOUT_MS,
  );

  test(
    "a SQLite database at another schema version is refused, and left as it was (not migrated)",
    async () => {
      const dir = copyOfDeployment((db) => db.exec("DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)"));
      const versions = () => {
        const db = new Database(databasePath(dir), { readonly: true, strict: true });
        try {
          return db.query<{ version: number }, []>("SELECT version FROM schema_migrations ORDER BY version").all();
        } finally {
          db.close();
        }
      };
      const before = versions();
      const r = await attempt(dir);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/the SQLite database is at schema version \d+ \(\d+ migrations\), this binary's is \d+/);
      expect(r.rows).toBe(0);
      expect(versions()).toEqual(before);
    },
    TIMEOUT_MS,
  );

  test(
    "refused while a server runs on the data directory",
    async () => {
      const dir = copyOfDeployment();
      // This test process stands in for the server: it holds the data directory's lock.
      const held = lockDataDir(dir);
      if (!("lock" in held)) throw new Error("the copy's data directory is locked already");
      let r;
      try {
        r = await attempt(dir);
      } finally {
        held.lock.release();
      }
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`the data directory ${dir} is in use by another atelier process (pid ${process.pid})`);
      expect(r.rows).toBe(0);
    },
    TIMEOUT_MS,
  );

  test(
    "usage errors exit 2; an unreachable server exits 1 without printing the password",
    async () => {
      const missing = await atelier(dataDir, "migrate-store");
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain("migrate-store needs --to postgres://… (or [database] url, or ATELIER_DATABASE_URL)");
      const wrongScheme = await atelier(dataDir, "migrate-store", "--to", "mysql://root:pw@127.0.0.1/db");
      expect(wrongScheme.code).toBe(2);
      expect(wrongScheme.stderr).toContain("--to must be a postgres:// or postgresql:// URL");
      const secret = "unreachable-pw-5521";
      const down = await atelier(dataDir, "migrate-store", "--to", `postgres://someone:${secret}@127.0.0.1:1/atelier`);
      expect(down.code).toBe(1);
      expect(down.stderr).toContain("127.0.0.1:1/atelier");
      expect(down.stdout + down.stderr).not.toContain(secret);
    },
    TIMEOUT_MS,
  );
});

test(
  "small batches and blobs: a copy in batches of 2 rows and 1 KiB holds the same rows, blobs byte for byte",
  async () => {
    const dir = copyOfDeployment((db) => {
      // A queued task's input images: the one table with blobs of real size.
      const task = db.query<{ id: string }, []>("SELECT id FROM tasks LIMIT 1").get()!;
      for (let i = 0; i < 5; i++) {
        const bytes = new Uint8Array(3000 + i).map((_, j) => (j * 7 + i) & 0xff);
        db.query("INSERT INTO task_inputs (task_id, position, role, param, mime, width, height, bytes) VALUES (?, ?, 'image', 'image', 'image/png', 8, 8, ?)").run(task.id, i, bytes);
      }
    });
    const pg = await freshPostgres();
    const target = await openPostgres(pg.url);
    try {
      const report = await copyDatabaseFileToPostgres(databasePath(dir), target, { batchRows: 2, batchBytes: 1024 });
      expect(report.tables.find((t) => t.table === "task_inputs")?.rows).toBe(5);
      const source = new Database(databasePath(dir), { readonly: true, strict: true });
      try {
        for (const t of sqliteTables(source)) expect({ table: t, rows: await postgresRows(target, t) }).toEqual({ table: t, rows: sqliteRows(source, t) });
      } finally {
        source.close();
      }
    } finally {
      await target.close();
    }
  },
  TIMEOUT_MS,
);

test(
  "a write to the SQLite database while it is copied (a server started meanwhile, say): nothing is kept",
  async () => {
    const dir = copyOfDeployment();
    const pg = await freshPostgres();
    const target = await openPostgres(pg.url);
    try {
      // The copy's snapshot is taken before its first await; the write lands after it.
      const copying = copyDatabaseFileToPostgres(databasePath(dir), target, { batchRows: 1 });
      const writer = new Database(databasePath(dir), { strict: true });
      writer.exec("PRAGMA busy_timeout = 5000");
      writer.query("INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, expires_at) SELECT 'late', MIN(id), 'csrf', 0, 1 FROM users").run();
      writer.close();
      await expect(copying).rejects.toThrow("the SQLite database changed while it was copied");
      const source = new Database(databasePath(dir), { readonly: true });
      const tables = sqliteTables(source);
      source.close();
      expect(tables.length).toBeGreaterThan(10);
      expect(await postgresRowCount(target, tables)).toBe(0);
    } finally {
      await target.close();
    }
  },
  TIMEOUT_MS,
);
