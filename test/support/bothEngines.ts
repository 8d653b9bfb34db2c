/**
 * The two SQL engines a store test runs on: SQLite in memory and a real PostgreSQL. Each
 * `open()` gives a fresh database at the latest schema and two clients on it, standing for two
 * instances: on PostgreSQL two pools (real races), on SQLite the one connection both share
 * (two processes on one SQLite file are covered by the tests of the file store itself).
 */
import { openDatabase } from "../../src/store/database";
import { SqliteClient, type SqlClient } from "../../src/store/sql";
import { startPostgres, type TestPostgres } from "./postgresServer";

export interface Engine {
  name: string;
  open(): Promise<{ a: SqlClient; b: SqlClient }>;
  /** Closes or drops everything this engine opened. */
  stop(): Promise<void>;
}

function sqliteEngine(): Engine {
  const clients: SqlClient[] = [];
  return {
    name: "SQLite",
    async open() {
      const a = new SqliteClient(openDatabase(":memory:"));
      clients.push(a);
      return { a, b: a };
    },
    async stop() {
      for (const c of clients.splice(0)) await c.close();
    },
  };
}

function postgresEngine(): Engine {
  const dbs: TestPostgres[] = [];
  return {
    name: "PostgreSQL",
    async open() {
      const pg = await startPostgres({ migrated: true });
      dbs.push(pg);
      return { a: pg.client(), b: pg.client() };
    },
    async stop() {
      for (const pg of dbs.splice(0)) await pg.stop();
    },
  };
}

/** A fresh pair of engines for one test file. */
export function bothEngines(): Engine[] {
  return [sqliteEngine(), postgresEngine()];
}
