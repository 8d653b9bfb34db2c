import { afterAll, describe, expect, test } from "bun:test";
import { Database, type SQLQueryBindings } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../../src/store";
import { DatabaseTooNewError, databasePath, latestVersion, openDatabase, schemaVersion } from "../../src/store/database";
import { migrations } from "../../src/store/migrations";
import { KEY_SPEND_SQL } from "../../src/store/apiKeys";
import { historyPage } from "../../src/store/historyPages";
import { SqliteClient } from "../../src/store/sql";
import { historyStatements } from "../support/historyStatements";

const dirs: string[] = [];
function dataDir(): string {
  const d = mkdtempSync(join(tmpdir(), "atelier-db-test-"));
  dirs.push(d);
  return d;
}
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/**
 * A database written by `seed` at schema `version` (the migrations up to it), then opened by this
 * binary, which migrates it to the latest: what an upgrade does to a data dir. `seed` may return
 * what it read before the upgrade.
 */
function upgradedFrom<T>(version: number, seed: (db: Database) => T): { db: Database; before: T } {
  const dir = dataDir();
  const old = openDatabase(dir, migrations.filter((m) => m.version <= version));
  const before = seed(old);
  old.close();
  return { db: openDatabase(dir), before };
}

describe("openDatabase", () => {
  test("creates the data directory, applies every migration once and records it", () => {
    const dir = join(dataDir(), "nested", "data");
    const db = openDatabase(dir);
    expect(schemaVersion(db)).toBe(latestVersion());
    const recorded = db.query<{ version: number }, []>("SELECT version FROM schema_migrations ORDER BY version").all();
    expect(recorded.map((r) => r.version)).toEqual(migrations.map((m) => m.version).sort((a, b) => a - b));
    db.close();
    // Opening again applies nothing new.
    const again = openDatabase(dir);
    expect(again.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM schema_migrations").get()!.n).toBe(migrations.length);
    again.close();
  });

  test("migration 14 rebuilds the history's and the ledger's time indexes ascending: rows kept, newest first still read from the index", async () => {
    const { db } = upgradedFrom(13, (old) => {
      old.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('idx@example.com', 'x', 5, 0)");
      old.run("INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1, 'grant', 5, 1)");
      for (const [id, at] of [["req_a", 10], ["req_b", 30], ["req_c", 20]] as const) {
        old.run("INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES (?, 1, 'chat', '/v1/chat/completions', 'm', 'succeeded', ?)", [id, at]);
      }
    });
    expect(schemaVersion(db)).toBe(latestVersion());
    for (const index of ["requests_user_time", "ledger_user_time"]) {
      // index_xinfo's desc: 0 for an ascending key column (a new row appends to its user's range).
      const keys = db.query<{ name: string; desc: number }, []>(`PRAGMA index_xinfo(${index})`).all().filter((c) => c.name === "created_at");
      expect(keys).toEqual([{ ...keys[0]!, name: "created_at", desc: 0 }]);
    }
    const plan = db.query<{ detail: string }, []>("EXPLAIN QUERY PLAN SELECT * FROM requests WHERE user_id = 1 ORDER BY created_at DESC, id DESC LIMIT 50").all();
    expect(plan.map((p) => p.detail).join(" ")).toContain("USING INDEX requests_user_time");
    const store = createStore(db, latestVersion());
    expect((await store.requests.list({ userId: 1 })).map((r) => r.id)).toEqual(["req_b", "req_c", "req_a"]);
    expect(await store.credits.ledgerSum(1)).toBe(5);
    db.close();
  });

  test("migration 15 keeps the spends and reads them from image rows only: a key's and a user's chat history is not summed", async () => {
    const { db } = upgradedFrom(14, (old) => {
      old.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('spend@example.com', 'x', 5, 0)");
      old.run("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at, credit_cap) VALUES (1, 'k', 'sk-atl-abcd', 'h', 0, 10)");
      const row = "INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, credits_refunded, created_at) VALUES (?, 1, 1, ?, 'e', 'm', ?, ?, ?, ?)";
      old.run(row, ["req_i1", "image", "succeeded", 2, 0, 1]);
      old.run(row, ["req_i2", "image", "failed", 3, 3, 2]);
      old.run(row, ["req_i3", "image", "pending", 1, 0, 3]);
      for (let i = 0; i < 20; i++) old.run(row, [`req_c${i}`, "chat", "succeeded", 0, 0, 10 + i]);
    });
    expect(schemaVersion(db)).toBe(latestVersion());
    const store = createStore(db, latestVersion());
    expect(await store.keys.spent(1)).toBe(3);
    expect((await store.keys.listWithSpend(1)).map((k) => k.credits_spent)).toEqual([3]);
    expect((await store.requests.spentByUsers([1])).get(1)).toBe(3);
    // Each spend is answered from its partial index alone, which holds image rows only.
    const planOf = (sql: string) => db.query<{ detail: string }, [number]>(`EXPLAIN QUERY PLAN ${sql}`).all(1).map((p) => p.detail).join(" ");
    expect(planOf(KEY_SPEND_SQL)).toContain("COVERING INDEX requests_key_spend");
    expect(planOf("SELECT user_id, SUM(credits_charged - credits_refunded) FROM requests WHERE kind = 'image' AND user_id IN (?) GROUP BY user_id")).toContain(
      "COVERING INDEX requests_user_spend",
    );
    const definitions = db.query<{ name: string; sql: string }, []>("SELECT name, sql FROM sqlite_master WHERE name IN ('requests_key_spend', 'requests_user_spend') ORDER BY name").all();
    expect(definitions.map((d) => [d.name, d.sql.slice(d.sql.indexOf(" WHERE "))])).toEqual([
      ["requests_key_spend", " WHERE key_id IS NOT NULL AND kind = 'image'"],
      ["requests_user_spend", " WHERE kind = 'image'"],
    ]);
    await store.close();
  });

  test("migration 17: every history page and total is read from an index in time order or a bounded search, never a sort or scan of the whole table", async () => {
    const { db } = upgradedFrom(16, (old) => {
      old.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('a@example.com', 'x', 5, 0), ('b@example.com', 'x', 5, 0)");
      const row = "INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES (?, ?, ?, 'e', 'm', 'succeeded', ?)";
      old.run(row, ["req_a1", 1, "chat", 10]);
      old.run(row, ["req_b1", 2, "image", 20]);
      old.run(row, ["req_a2", 1, "image", 30]);
      // Enough older rows that a full scan is not the cheap way (SQLite reads a tiny table whole).
      old.run(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
               INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) SELECT printf('req_old_%04d', i), 1 + i % 2, 'chat', 'e', 'm', 'succeeded', -i FROM n`);
    });
    expect(schemaVersion(db)).toBe(latestVersion());
    const client = new SqliteClient(db);
    expect((await historyPage(client, {}, null, 4)).rows.map((r) => r.id)).toEqual(["req_a2", "req_b1", "req_a1", "req_old_0001"]);
    // Each statement explained with its own parameters. (25 rows a page, as the workbench's: for a
    // LIMIT of 2, SQLite's planner sorts the whole table even with 100 000 rows.)
    const statements = await historyStatements(client, [1, 2], { createdAt: 30, id: "req_a2" });
    for (const [sql, params] of statements) {
      const plan = db.query<{ detail: string }, SQLQueryBindings[]>(`EXPLAIN QUERY PLAN ${sql}`).all(...(params as SQLQueryBindings[])).map((p) => p.detail).join(" | ");
      expect({ sql, plan }).not.toEqual({ sql, plan: expect.stringMatching(/SCAN requests(?! USING)|TEMP B-TREE FOR ORDER BY/) });
    }
    expect(statements.length).toBeGreaterThan(30);
    db.close();
  });

  test("uses WAL, a busy timeout, foreign keys and STRICT tables", () => {
    const db = openDatabase(dataDir());
    expect(db.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()!.journal_mode).toBe("wal");
    expect(db.query<{ timeout: number }, []>("PRAGMA busy_timeout").get()!.timeout).toBeGreaterThan(0);
    expect(db.query<{ foreign_keys: number }, []>("PRAGMA foreign_keys").get()!.foreign_keys).toBe(1);
    const sql = db.query<{ sql: string }, []>("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'users'").get()!.sql;
    expect(sql).toMatch(/STRICT\s*$/);
    db.close();
  });

  test("the schema itself refuses negative credits and duplicate emails regardless of case", async () => {
    const db = openDatabase(dataDir());
    const store = createStore(db, latestVersion());
    await store.users.create({ email: "Ada@Example.com", passwordHash: null, role: "user", credits: 0 }, Date.now());
    await expect(store.users.create({ email: "ada@example.COM", passwordHash: null, role: "user", credits: 0 }, Date.now())).rejects.toThrow(/already exists/);
    expect(() => db.exec("UPDATE users SET credits = -1")).toThrow(/CHECK/);
    expect((await store.users.byEmail("ADA@example.com"))?.email).toBe("Ada@Example.com");
    await store.close();
  });

  test("refuses a database written by a newer binary, and leaves it untouched", () => {
    const dir = dataDir();
    openDatabase(dir).close();
    const raw = new Database(databasePath(dir));
    const future = latestVersion() + 1;
    raw.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from the future', 0)").run(future);
    raw.close();

    expect(() => openDatabase(dir)).toThrow(DatabaseTooNewError);
    expect(() => openDatabase(dir)).toThrow(`schema version ${future}, but this binary knows only up to ${latestVersion()}`);
    const check = new Database(databasePath(dir));
    expect(schemaVersion(check)).toBe(future);
    check.close();
  });

  test("a migration numbered below the newest applied one (merged later) is still applied, once", () => {
    const dir = dataDir();
    const first = { version: 1, name: "one", sql: "CREATE TABLE one (x INTEGER) STRICT;" };
    const third = { version: 3, name: "three", sql: "CREATE TABLE three (x INTEGER) STRICT;" };
    const second = { version: 2, name: "two", sql: "CREATE TABLE two (x INTEGER) STRICT;" };
    openDatabase(dir, [first, third]).close();
    const db = openDatabase(dir, [first, second, third]);
    expect(db.query<{ version: number }, []>("SELECT version FROM schema_migrations ORDER BY version").all().map((r) => r.version)).toEqual([1, 2, 3]);
    expect(db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'two'").get()!.n).toBe(1);
    db.close();
    openDatabase(dir, [first, second, third]).close();
  });

  test("migration 10 rebuilds the ledger with every row and its once-per-request rule intact", () => {
    const { db: after, before: rows } = upgradedFrom(9, (before) => {
      before.exec("INSERT INTO users (id, email, credits, created_at) VALUES (1, 'a@b.c', 4, 0)");
      before.exec("INSERT INTO requests (id, user_id, kind, endpoint, model, status, credits_charged, created_at) VALUES ('r1', 1, 'image', '/v1/images/generations', 'm', 'succeeded', 1, 0)");
      before.exec("INSERT INTO ledger (id, user_id, kind, amount, note, actor, created_at) VALUES (7, 1, 'grant', 5, 'welcome', 'cli', 10)");
      before.exec("INSERT INTO ledger (id, user_id, kind, amount, request_id, created_at) VALUES (9, 1, 'charge', -1, 'r1', 11)");
      return before.query("SELECT * FROM ledger ORDER BY id").all();
    });
    expect(after.query("SELECT id, user_id, kind, amount, request_id, note, actor, created_at FROM ledger ORDER BY id").all()).toEqual(rows);
    expect(() => after.exec("INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1, 'charge', -1, 'r1', 12)")).toThrow(/UNIQUE/);
    expect(() => after.exec("INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1, 'grant', -1, 12)")).toThrow(/CHECK/);
    const indexes = after.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'ledger' AND sql IS NOT NULL ORDER BY name").all();
    expect(indexes.map((i) => i.name)).toEqual(["ledger_once_per_code", "ledger_once_per_request", "ledger_user_time"]);
    after.close();
  });

  test("a store reports not ready when the schema is behind the binary", async () => {
    const db = openDatabase(dataDir());
    expect(await createStore(db, latestVersion()).ready()).toBe(true);
    expect(await createStore(db, latestVersion() + 1).ready()).toBe(false);
    db.close();
  });
});
