/**
 * Opens the SQLite database in WAL mode and brings its schema up to date.
 * CLI commands and the server may hold the same file open at once; WAL plus busy_timeout
 * lets them interleave writes, and every read goes to the file, so changes are seen at once.
 */
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { migrations, type Migration } from "./migrations";
import { ensurePrivateFile, makePrivateDir, tightenFile } from "./privateFiles";

export type Db = Database;

export class DatabaseTooNewError extends Error {
  override name = "DatabaseTooNewError";
}

export function databasePath(dataDir: string): string {
  return join(dataDir, "atelier.db");
}

/** ":memory:" gives a private in-memory database (used to print the OpenAPI document). */
export function openDatabase(dataDir: string, list: Migration[] = migrations): Db {
  const memory = dataDir === ":memory:";
  if (!memory) privateDatabaseFiles(dataDir);
  const db = new Database(memory ? ":memory:" : databasePath(dataDir), { create: true, strict: true });
  if (!memory) db.exec("PRAGMA journal_mode = WAL");
  db.exec("PRAGMA busy_timeout = 5000");
  db.exec("PRAGMA foreign_keys = ON");
  db.exec("PRAGMA synchronous = NORMAL");
  migrate(db, list);
  return db;
}

/**
 * The data directory (when missing) 0700 and the database 0600 before SQLite opens it: SQLite
 * creates a new file 0644 (less the umask) but gives the -wal and -shm files it makes later the
 * database's own mode, so a 0600 database keeps them 0600 too. Ones an older Atelier left
 * 0644 are tightened here.
 */
function privateDatabaseFiles(dataDir: string): void {
  makePrivateDir(dataDir);
  const file = databasePath(dataDir);
  ensurePrivateFile(file);
  for (const suffix of ["-wal", "-shm"]) tightenFile(file + suffix);
}

export function schemaVersion(db: Db): number {
  const row = db.query<{ v: number | null }, []>("SELECT MAX(version) AS v FROM schema_migrations").get();
  return row?.v ?? 0;
}

export function latestVersion(list: Migration[] = migrations): number {
  return list.reduce((max, m) => Math.max(max, m.version), 0);
}

/** Refuses a database whose schema is newer than this binary's migrations (both backends). */
export function refuseNewerDatabase(current: number, list: Migration[]): void {
  const latest = latestVersion(list);
  if (current > latest) {
    throw new DatabaseTooNewError(
      `the database is at schema version ${current}, but this binary knows only up to ${latest}; run a newer atelier (or restore a backup)`,
    );
  }
}

/**
 * Every migration not yet recorded, in order: not just those above the newest applied one, so a
 * lower number that joined the list later (branches merged out of order) still runs.
 */
export function unappliedMigrations(applied: Iterable<number>, list: Migration[]): Migration[] {
  const done = new Set(applied);
  return [...list].sort((a, b) => a.version - b.version).filter((m) => !done.has(m.version));
}

function migrate(db: Db, list: Migration[]): void {
  db.exec(
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
  );
  // IMMEDIATE takes the write lock first, so two processes starting together migrate once.
  db.transaction(() => {
    refuseNewerDatabase(schemaVersion(db), list);
    const applied = db.query<{ version: number }, []>("SELECT version FROM schema_migrations").all().map((r) => r.version);
    for (const m of unappliedMigrations(applied, list)) {
      db.exec(m.sql);
      db.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)").run(m.version, m.name, Date.now());
    }
  }).immediate();
}
