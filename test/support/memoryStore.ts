/**
 * The real SQLite store on a private in-memory database (real SQL, CHECKs and transactions;
 * nothing on disk), plus helpers to add users and to make one store method meet a
 * "database is locked" error as another process's write lock would.
 */
import { createStore, type Store } from "../../src/store";
import { latestVersion, openDatabase, type Db } from "../../src/store/database";
import { SqliteClient } from "../../src/store/sql";

const handles = new WeakMap<Store, Db>();

export function memoryStore(): Store {
  const db = openDatabase(":memory:");
  const store = createStore(db, latestVersion());
  handles.set(store, db);
  return store;
}

/** Lets rawDb find the handle under a store a test opened itself (on a file). */
export function trackRawDb(store: Store, db: Db): Store {
  handles.set(store, db);
  return store;
}

/** The SQLite handle under a memoryStore(), for tests that check the schema's own rules. */
export function rawDb(store: Store): Db {
  const db = handles.get(store);
  if (!db) throw new Error("rawDb: not a memoryStore()");
  return db;
}

let users = 0;

/**
 * A user with `credits` (written as a grant, like the real CLI does); returns the id. Written
 * straight to the store's SQLite handle, synchronously, so that tests of synchronous store modules can
 * seed users without awaiting (UserStore.create is async; test/core/accounts.test.ts covers it).
 */
export function addUser(store: Store, credits: number, now = 1_000_000): number {
  if (!(store.sql instanceof SqliteClient)) throw new Error("addUser: a SQLite store only");
  const db = store.sql.db;
  return db.transaction(() => {
    const id = db
      .query<{ id: number }, [string, number, number]>("INSERT INTO users (email, role, credits, created_at) VALUES (?, 'user', ?, ?) RETURNING id")
      .get(`user${++users}@example.test`, credits, now)!.id;
    if (credits > 0) {
      db.query("INSERT INTO ledger (user_id, kind, amount, note, created_at) VALUES (?, 'grant', ?, 'initial credits', ?)").run(id, credits, now);
    }
    return id;
  }).immediate();
}

/** What bun:sqlite throws when a write meets another connection's lock (busy_timeout 0). */
export function sqliteBusy(): Error & { code: string } {
  return Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY", errno: 5 });
}

export interface BusyInterceptor {
  /** Calls made so far (busy ones included). */
  readonly calls: number;
  /** Calls that went through to the real method. */
  readonly landed: number;
  restore(): void;
}

/**
 * Replaces target[method]: call n (1-based) throws SQLITE_BUSY while busy(n) is true, before
 * anything is written (as SQLite does: BEGIN IMMEDIATE fails first); otherwise it calls through.
 */
export function interceptBusy<T extends object>(target: T, method: keyof T & string, busy: (call: number) => boolean): BusyInterceptor {
  const slot = target as unknown as Record<string, (...args: unknown[]) => unknown>;
  const original = slot[method]!;
  let calls = 0;
  let landed = 0;
  slot[method] = (...args: unknown[]) => {
    calls++;
    if (busy(calls)) throw sqliteBusy();
    landed++;
    return original.apply(target, args);
  };
  return {
    get calls() {
      return calls;
    },
    get landed() {
      return landed;
    },
    restore: () => {
      slot[method] = original;
    },
  };
}
