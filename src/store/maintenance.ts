/**
 * The SQL of the maintenance commands (`backup`, `restore`, `doctor`). What is SQLite's own (an
 * online copy of the file with VACUUM INTO, PRAGMA integrity_check) works on SQLite files only
 * and the commands refuse it on PostgreSQL, whose own tools (pg_dump, amcheck) do that there;
 * the schema version and the ledger invariant are asked in SQL both engines share
 * (inspectStore). Nothing here migrates: a check must not change what it checks.
 */
import { Database } from "bun:sqlite";
import { closeSync, openSync } from "node:fs";
import { latestVersion } from "./database";
import { PRIVATE_FILE } from "./privateFiles";
import { SqliteClient, type SqlDialect, type SqlQueries } from "./sql";

/** The schema version and the ledger invariant of a database, on either engine. */
export interface StoreReport {
  /** The highest applied migration (0 when the database has no schema_migrations table). */
  schemaVersion: number;
  /** Users whose balance differs from the sum of their ledger entries (ids, at most 10). */
  ledgerMismatches: number[];
  /** How many users there are. */
  users: number;
}

async function hasTable(q: SqlQueries, name: string): Promise<boolean> {
  const sql =
    q.dialect === "postgres"
      ? "SELECT 1 AS one FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?"
      : "SELECT 1 AS one FROM sqlite_master WHERE type = 'table' AND name = ?";
  return (await q.get(sql, [name])) !== null;
}

/** Reads the schema version and checks every balance against its ledger; writes nothing. */
export async function inspectStore(q: SqlQueries): Promise<StoreReport> {
  const schemaVersion = (await hasTable(q, "schema_migrations"))
    ? ((await q.get<{ v: number | null }>("SELECT MAX(version) AS v FROM schema_migrations"))?.v ?? 0)
    : 0;
  if (!(await hasTable(q, "users")) || !(await hasTable(q, "ledger"))) return { schemaVersion, ledgerMismatches: [], users: 0 };
  const users = (await q.get<{ n: number }>("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM users"))?.n ?? 0;
  const ledgerMismatches = (
    await q.all<{ id: number }>(
      `SELECT u.id FROM users u LEFT JOIN (SELECT user_id, CAST(SUM(amount) AS BIGINT) AS s FROM ledger GROUP BY user_id) l ON l.user_id = u.id
        WHERE u.credits != COALESCE(l.s, 0) ORDER BY u.id LIMIT 10`,
    )
  ).map((r) => r.id);
  return { schemaVersion, ledgerMismatches, users };
}

/** Why `atelier <command>` does not run on this deployment's database, or null when it does. */
export function sqliteOnlyRefusal(command: "backup" | "restore", dialect: SqlDialect): string | null {
  if (dialect === "sqlite") return null;
  return `atelier ${command} copies the embedded SQLite database (data_dir/atelier.db), but this deployment keeps its data in PostgreSQL ([database] url): back it up with PostgreSQL's own tools (pg_dump and pg_restore, or your provider's backups)`;
}

/** What an SQLite database file is: SQLite's own verdict, its schema version, and the ledger invariant. */
export interface DatabaseReport extends StoreReport {
  /** "ok", or SQLite's first complaints (PRAGMA integrity_check). */
  integrity: string;
  /** The newest migration this binary knows. */
  latestVersion: number;
}

/**
 * Writes a consistent copy of the database at `file` to `target` (which must not exist) with
 * `VACUUM INTO`: one read transaction, so it sees a single committed state while a server keeps
 * writing (WAL lets both go on), and the copy is compacted and has no -wal file of its own.
 * The copy holds the same secrets as the database: `target` is created 0600 first (VACUUM INTO
 * fills an empty file), since SQLite would create it 0644 less the umask.
 */
export function copyDatabaseInto(file: string, target: string): void {
  closeSync(openSync(target, "wx", PRIVATE_FILE));
  const db = new Database(file, { readwrite: true, strict: true });
  try {
    db.exec("PRAGMA busy_timeout = 5000");
    db.query("VACUUM INTO ?").run(target);
  } finally {
    db.close();
  }
}

/** Reads the SQLite file `file` read-only and reports on it (throws when it is not an SQLite database). */
export async function inspectDatabase(file: string): Promise<DatabaseReport> {
  const db = new Database(file, { readonly: true, strict: true });
  try {
    db.exec("PRAGMA busy_timeout = 5000");
    const complaints = db.query<{ integrity_check: string }, []>("PRAGMA integrity_check(5)").all().map((r) => r.integrity_check);
    const store = await inspectStore(new SqliteClient(db));
    return { integrity: complaints.join("; "), ...store, latestVersion: latestVersion() };
  } finally {
    db.close();
  }
}
