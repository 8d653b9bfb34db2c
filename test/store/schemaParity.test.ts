/**
 * The two schemas are one schema: migrations.ts (SQLite) and postgresMigrations.ts (PostgreSQL)
 * have the same numbered migrations, end with the same tables, columns and indexes, and refuse
 * the same writes with the same kind of constraint, both checked against the real engines (a
 * PostgreSQL on loopback from test/support/postgresServer).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { openDatabase } from "../../src/store/database";
import { migrations } from "../../src/store/migrations";
import { postgresMigrations } from "../../src/store/postgresMigrations";
import { openPostgres } from "../../src/store/postgresDatabase";
import { postgresState, SqliteClient, type PostgresClient, type SqlClient } from "../../src/store/sql";
import { startPostgres, type TestPostgres } from "../support/postgresServer";

let pg: TestPostgres;
let postgres: PostgresClient;
let sqlite: SqliteClient;

beforeAll(async () => {
  pg = await startPostgres();
  postgres = await openPostgres(pg.url);
  sqlite = new SqliteClient(openDatabase(":memory:"));
});

afterAll(async () => {
  await postgres?.close();
  await sqlite?.close();
  await pg?.stop();
});

interface Column {
  name: string;
  notNull: boolean;
  primaryKey: boolean;
}

async function sqliteTables(): Promise<Map<string, Column[]>> {
  const names = await sqlite.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
  const out = new Map<string, Column[]>();
  for (const { name } of names) {
    const cols = await sqlite.all<{ name: string; notnull: number; pk: number }>(`PRAGMA table_info(${name})`);
    // A primary key column never holds NULL in practice (PostgreSQL makes it NOT NULL; SQLite's
    // table_info reports 0 for it), so both sides count it as NOT NULL.
    out.set(
      name,
      cols.map((c) => ({ name: c.name, notNull: c.notnull === 1 || c.pk > 0, primaryKey: c.pk > 0 })),
    );
  }
  return out;
}

async function postgresTables(): Promise<Map<string, Column[]>> {
  const cols = await postgres.all<{ table_name: string; column_name: string; is_nullable: string }>(
    `SELECT table_name, column_name, is_nullable FROM information_schema.columns
      WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
  );
  const pks = await postgres.all<{ table_name: string; column_name: string }>(
    `SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc
       JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema
      WHERE tc.table_schema = current_schema() AND tc.constraint_type = 'PRIMARY KEY'`,
  );
  const pk = new Set(pks.map((r) => `${r.table_name}.${r.column_name}`));
  const out = new Map<string, Column[]>();
  for (const c of cols) {
    const list = out.get(c.table_name) ?? [];
    list.push({ name: c.column_name, notNull: c.is_nullable === "NO", primaryKey: pk.has(`${c.table_name}.${c.column_name}`) });
    out.set(c.table_name, list);
  }
  return out;
}

interface Index {
  name: string;
  unique: boolean;
  partial: boolean;
}

/** The indexes a migration created by name (not those SQLite and PostgreSQL make for PRIMARY KEY and UNIQUE). */
async function sqliteIndexes(): Promise<Index[]> {
  const tables = await sqlite.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
  const out: Index[] = [];
  for (const { name } of tables) {
    for (const i of await sqlite.all<{ name: string; unique: number; origin: string; partial: number }>(`PRAGMA index_list(${name})`)) {
      if (i.origin === "c") out.push({ name: i.name, unique: i.unique === 1, partial: i.partial === 1 });
    }
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

async function postgresIndexes(): Promise<Index[]> {
  const rows = await postgres.all<{ name: string; unique: boolean; partial: boolean }>(
    `SELECT c.relname AS name, i.indisunique AS unique, i.indpred IS NOT NULL AS partial
       FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = current_schema()
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)`,
  );
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}

describe("schema parity: SQLite and PostgreSQL", () => {
  test("the same numbered migrations with the same names", () => {
    const list = (ms: typeof migrations) => ms.map((m) => ({ version: m.version, name: m.name }));
    expect(list(postgresMigrations)).toEqual(list(migrations));
  });

  test("every table has the same columns, in the same order, with the same NOT NULL and primary key", async () => {
    const lite = await sqliteTables();
    const pgTables = await postgresTables();
    expect([...pgTables.keys()].sort()).toEqual([...lite.keys()].sort());
    expect(lite.size).toBeGreaterThanOrEqual(18);
    for (const [table, columns] of lite) expect({ table, columns: pgTables.get(table) }).toEqual({ table, columns });
  });

  test("the same named indexes, unique and partial alike; users' case-insensitive email is an index on lower(email) on PostgreSQL", async () => {
    const lite = await sqliteIndexes();
    const pgIndexes = await postgresIndexes();
    // PostgreSQL has users_email_lower from migration 1 (its twin of SQLite's unnamed `UNIQUE
    // COLLATE NOCASE`); SQLite gains the same index when its lookups move to lower(email).
    const emailIndex = { name: "users_email_lower", unique: true, partial: false };
    const expected = lite.some((i) => i.name === emailIndex.name) ? lite : [...lite, emailIndex].sort((a, b) => a.name.localeCompare(b.name));
    expect(pgIndexes).toEqual(expected);
    expect(lite.map((i) => i.name)).toContain("ledger_once_per_request");
    expect(lite.map((i) => i.name)).not.toContain("requests_status"); // dropped by migration 9 on both
  });

  test("every text column of PostgreSQL compares bytes, like SQLite's BINARY (COLLATE \"C\"), whatever the database's default", async () => {
    const text = await postgres.all<{ table_name: string; column_name: string; collation_name: string | null }>(
      `SELECT table_name, column_name, collation_name FROM information_schema.columns
        WHERE table_schema = current_schema() AND data_type = 'text' AND table_name != 'schema_migrations'`,
    );
    expect(text.length).toBeGreaterThan(50);
    expect(text.filter((c) => c.collation_name !== "C")).toEqual([]);
  });

  test("on a database whose default collation is not C (ICU en-US), ids sort and page, and emails fold, as on SQLite", async () => {
    const icu = await startPostgres({ createOptions: "TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'" });
    const other = await openPostgres(icu.url, { max: 1 });
    try {
      // The database really does sort differently by default: en-US puts "a" before "B".
      expect(await other.get("SELECT CAST('a' AS TEXT) < CAST('B' AS TEXT) AS a_first")).toEqual({ a_first: true });
      const ids = ["b", "B", "a", "A", "_z", "-z", "a-b", "ab", "Z", "a_b", "0"];
      const order = async (c: SqlClient) => {
        await c.transaction(async (tx) => {
          await tx.run("INSERT INTO users (id, email, created_at) VALUES (1001, 'ada@example.com', 0) ON CONFLICT (id) DO NOTHING");
          for (const id of ids) {
            await tx.run("INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES (?, 1001, 'chat', 'chat', 'm', 'succeeded', 0) ON CONFLICT (id) DO NOTHING", [id]);
          }
        });
        const all = (await c.all<{ id: string }>("SELECT id FROM requests WHERE user_id = 1001 ORDER BY id")).map((r) => r.id);
        const page = (await c.all<{ id: string }>("SELECT id FROM requests WHERE user_id = 1001 AND id < ? ORDER BY id DESC", ["a"])).map((r) => r.id);
        // The email folding of the unique index: ASCII letters only, as SQLite's NOCASE and lower().
        const accented = await c
          .run("INSERT INTO users (email, created_at) VALUES (?, 0)", ["\u00c9mile@example.com"])
          .then(() => c.run("INSERT INTO users (email, created_at) VALUES (?, 0)", ["\u00e9mile@example.com"]))
          .then(
            () => "both kept",
            (e: unknown) => refusalOf(e),
          );
        return { all, page, accented };
      };
      const onSqlite = await order(new SqliteClient(openDatabase(":memory:")));
      expect(onSqlite.all).toEqual([...ids].sort());
      expect(await order(other)).toEqual(onSqlite);
    } finally {
      await other.close();
      await icu.stop();
    }
  });

  test("schema_migrations records the same versions on both", async () => {
    const versions = (c: SqlClient) => c.all<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version");
    expect(await versions(postgres)).toEqual(await versions(sqlite));
  });
});

type Refusal = "check" | "unique" | "foreign key" | "not null";

/** Which constraint refused a write, as either engine reports it. */
function refusalOf(e: unknown): Refusal | string {
  const state = postgresState(e);
  if (state) return ({ "23514": "check", "23505": "unique", "23503": "foreign key", "23502": "not null", "22P02": "check" } as Record<string, Refusal>)[state] ?? `SQLSTATE ${state}`;
  const code = String((e as { code?: unknown }).code ?? "");
  return (
    ({ SQLITE_CONSTRAINT_CHECK: "check", SQLITE_CONSTRAINT_UNIQUE: "unique", SQLITE_CONSTRAINT_FOREIGNKEY: "foreign key", SQLITE_CONSTRAINT_NOTNULL: "not null" } as Record<string, Refusal>)[
      code
    ] ?? `${code}: ${(e as Error).message}`
  );
}

/**
 * What each case writes first (the rows it refers to), written the same on both engines. Explicit
 * ids far above the ones an insert without an id gets, so the two never collide.
 */
const SETUP: [string, (string | number)[]][] = [
  ["INSERT INTO users (id, email, role, credits, created_at) VALUES (1001, 'ada@example.com', 'user', 5, 0)", []],
  ["INSERT INTO requests (id, user_id, kind, endpoint, model, status, credits_charged, created_at) VALUES ('r1', 1001, 'image', 'generations', 'm', 'pending', 1, 0)", []],
  ["INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1001, 'charge', -1, 'r1', 0)", []],
  ["INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1001, 'refund', 1, 'r1', 0)", []],
  ["INSERT INTO redemption_batches (id, name, credits, code_count, created_by, created_at) VALUES (1001, 'b', 5, 1, 'admin', 0)", []],
  ["INSERT INTO redemption_codes (id, batch_id, code_hash) VALUES (1001, 1001, ?)", ["a".repeat(64)]],
  ["INSERT INTO ledger (user_id, kind, amount, code_id, created_at) VALUES (1001, 'redeem', 5, 1001, 0)", []],
  ["INSERT INTO api_keys (id, user_id, name, prefix, secret_hash, created_at) VALUES (1001, 1001, 'k', 'p1', 'h1', 0)", []],
];

/** Each: a write both engines must accept, then one both must refuse, and which constraint refuses it. */
const CASES: { name: string; accepted: string; refused: string; acceptedParams?: (string | number)[]; by: Refusal }[] = [
  { name: "a balance never goes negative", accepted: "UPDATE users SET credits = 0 WHERE id = 1001", refused: "UPDATE users SET credits = -1 WHERE id = 1001", by: "check" },
  {
    name: "refunded never exceeds charged",
    accepted: "UPDATE requests SET credits_refunded = 1 WHERE id = 'r1'",
    refused: "UPDATE requests SET credits_refunded = 2 WHERE id = 'r1'",
    by: "check",
  },
  {
    name: "one charge row per request",
    accepted: "INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1001, 'grant', 1, NULL, 0)",
    refused: "INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1001, 'charge', -1, 'r1', 0)",
    by: "unique",
  },
  {
    name: "one refund row per request",
    accepted: "INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1001, 'deduct', -1, NULL, 0)",
    refused: "INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (1001, 'refund', 1, 'r1', 0)",
    by: "unique",
  },
  {
    name: "a ledger row's sign matches its kind",
    accepted: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'grant', 3, 0)",
    refused: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'charge', 3, 0)",
    by: "check",
  },
  {
    name: "a redeem row names its code, and a code credits once",
    accepted: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'grant', 5, 0)",
    refused: "INSERT INTO ledger (user_id, kind, amount, code_id, created_at) VALUES (1001, 'redeem', 5, 1001, 0)",
    by: "unique",
  },
  {
    name: "a redeem row without a code is refused",
    accepted: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'grant', 1, 0)",
    refused: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'redeem', 5, 0)",
    by: "check",
  },
  {
    name: "an unknown ledger kind is refused",
    accepted: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'deduct', -1, 0)",
    refused: "INSERT INTO ledger (user_id, kind, amount, created_at) VALUES (1001, 'bonus', 1, 0)",
    by: "check",
  },
  {
    name: "one account per email address, whatever its case",
    accepted: "INSERT INTO users (email, created_at) VALUES ('grace@example.com', 0)",
    refused: "INSERT INTO users (email, created_at) VALUES ('ADA@Example.COM', 0)",
    by: "unique",
  },
  {
    name: "a request's row refers to a user that exists",
    accepted: "INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES ('r2', 1001, 'chat', 'chat', 'm', 'succeeded', 0)",
    refused: "INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES ('r3', 99, 'chat', 'chat', 'm', 'succeeded', 0)",
    by: "foreign key",
  },
  {
    name: "a request's status is one of the four",
    accepted: "UPDATE requests SET status = 'failed' WHERE id = 'r1'",
    refused: "UPDATE requests SET status = 'lost' WHERE id = 'r1'",
    by: "check",
  },
  {
    name: "a key's model allow-list is a JSON array",
    accepted: `UPDATE api_keys SET allowed_models = '["m"]' WHERE id = 1001`,
    refused: `UPDATE api_keys SET allowed_models = '{"m": 1}' WHERE id = 1001`,
    by: "check",
  },
  {
    name: "a key's credit cap is not negative",
    accepted: "UPDATE api_keys SET credit_cap = 0 WHERE id = 1001",
    refused: "UPDATE api_keys SET credit_cap = -1 WHERE id = 1001",
    by: "check",
  },
  {
    name: "a key's prefix is unique",
    accepted: "INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (1001, 'k2', 'p2', 'h2', 0)",
    refused: "INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (1001, 'k3', 'p1', 'h3', 0)",
    by: "unique",
  },
  {
    name: "a webhook delivery is pending exactly when it has a next attempt",
    accepted:
      "INSERT INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, next_attempt_at, created_at) VALUES ('e1', 1001, 't', 'test', 'u', '{}', 'pending', 1, 0)",
    refused:
      "INSERT INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, next_attempt_at, created_at) VALUES ('e2', 1001, 't', 'test', 'u', '{}', 'pending', NULL, 0)",
    by: "check",
  },
  {
    name: "a webhook endpoint's previous secret has an expiry, and an expiry has a previous secret",
    accepted:
      "INSERT INTO webhook_endpoints (user_id, secret_sealed, secret_created_at, previous_secret_sealed, previous_secret_expires_at, updated_at) VALUES (1001, 'v1.new', 0, 'v1.old', 1, 0)",
    refused: "UPDATE webhook_endpoints SET previous_secret_expires_at = NULL WHERE user_id = 1001",
    by: "check",
  },
  {
    name: "an image's sha256 is 64 characters",
    accepted: "INSERT INTO images (id, request_id, user_id, mime, bytes, width, height, sha256, created_at) VALUES ('i1', 'r1', 1001, 'image/png', 1, 1, 1, ?, 0)",
    refused: "INSERT INTO images (id, request_id, user_id, mime, bytes, width, height, sha256, created_at) VALUES ('i2', 'r1', 1001, 'image/png', 1, 1, 1, 'abc', 0)",
    acceptedParams: ["b".repeat(64)],
    by: "check",
  },
  {
    name: "a session's user is required",
    accepted: "INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, expires_at) VALUES ('s1', 1001, 'c', 0, 1)",
    refused: "INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, expires_at) VALUES ('s2', NULL, 'c', 0, 1)",
    by: "not null",
  },
];

describe("schema parity: both engines refuse the same writes", () => {
  for (const c of CASES) {
    test(c.name, async () => {
      for (const client of [sqlite as SqlClient, postgres as SqlClient]) {
        // Each case in its own transaction, rolled back, so cases never see each other's rows.
        const rollback = new Error("rollback");
        const outcome = await client
          .transaction(async (tx) => {
            for (const [sql, params] of SETUP) await tx.run(sql, params);
            await tx.run(c.accepted, c.acceptedParams ?? []);
            if (client.dialect === "postgres") await tx.run("SAVEPOINT refused");
            let refusal: string | null = null;
            try {
              await tx.run(c.refused);
            } catch (e) {
              refusal = refusalOf(e);
            }
            if (client.dialect === "postgres") await tx.run("ROLLBACK TO SAVEPOINT refused");
            // The refused write changed nothing, and the transaction goes on.
            await tx.get("SELECT 1 AS one");
            throw Object.assign(rollback, { refusal });
          })
          .catch((e: unknown) => (e === rollback ? (rollback as Error & { refusal: string | null }).refusal : Promise.reject(e)));
        expect({ dialect: client.dialect, refusedBy: outcome }).toEqual({ dialect: client.dialect, refusedBy: c.by });
      }
    });
  }
});
