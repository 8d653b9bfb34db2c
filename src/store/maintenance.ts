/**
 * The SQL of the maintenance commands (`backup`, `restore`, `doctor`): an online copy of the
 * database, and the checks that say whether a database file is sound. Each opens the file
 * itself and never migrates it: a check must not change what it checks.
 */
import { Database } from "bun:sqlite";
import { latestVersion } from "./database";

/** What a database file is: SQLite's own verdict, its schema version, and the ledger invariant. */
export interface DatabaseReport {
  /** "ok", or SQLite's first complaints (PRAGMA integrity_check). */
  integrity: string;
  /** The highest applied migration (0 when the file has no schema_migrations table). */
  schemaVersion: number;
  /** The newest migration this binary knows. */
  latestVersion: number;
  /** Users whose balance differs from the sum of their ledger entries (ids, at most 10). */
  ledgerMismatches: number[];
  /** How many users there are. */
  users: number;
}

/**
 * Writes a consistent copy of the database at `file` to `target` (which must not exist) with
 * `VACUUM INTO`: one read transaction, so it sees a single committed state while a server keeps
 * writing (WAL lets both go on), and the copy is compacted and has no -wal file of its own.
 */
export function copyDatabaseInto(file: string, target: string): void {
  const db = new Database(file, { readwrite: true, strict: true });
  try {
    db.exec("PRAGMA busy_timeout = 5000");
    db.query("VACUUM INTO ?").run(target);
  } finally {
    db.close();
  }
}

/** Reads `file` read-only and reports on it (throws when it is not an SQLite database). */
export function inspectDatabase(file: string): DatabaseReport {
  const db = new Database(file, { readonly: true, strict: true });
  try {
    db.exec("PRAGMA busy_timeout = 5000");
    const complaints = db.query<{ integrity_check: string }, []>("PRAGMA integrity_check(5)").all().map((r) => r.integrity_check);
    const integrity = complaints.join("; ");
    const hasTable = (name: string) => db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== null;
    const schemaVersion = hasTable("schema_migrations")
      ? (db.query<{ v: number | null }, []>("SELECT MAX(version) AS v FROM schema_migrations").get()?.v ?? 0)
      : 0;
    let ledgerMismatches: number[] = [];
    let users = 0;
    if (hasTable("users") && hasTable("ledger")) {
      users = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM users").get()?.n ?? 0;
      ledgerMismatches = db
        .query<{ id: number }, []>(
          `SELECT u.id FROM users u LEFT JOIN (SELECT user_id, SUM(amount) AS s FROM ledger GROUP BY user_id) l ON l.user_id = u.id
            WHERE u.credits != COALESCE(l.s, 0) ORDER BY u.id LIMIT 10`,
        )
        .all()
        .map((r) => r.id);
    }
    return { integrity, schemaVersion, latestVersion: latestVersion(), ledgerMismatches, users };
  } finally {
    db.close();
  }
}
