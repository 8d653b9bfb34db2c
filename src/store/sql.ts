/**
 * The one SQL interface every store module is written against, with two clients:
 * - SQLite (bun:sqlite, synchronous underneath): the embedded default;
 * - PostgreSQL (Bun's built-in SQL client): the scale-out backend ([database] url).
 *
 * Statements are written once, in the SQL both engines share, with `?` placeholders (the
 * PostgreSQL client numbers them `$1, $2, …`). Where the dialects differ a module asks
 * `client.dialect` (row locks, upserts of the same shape work on both).
 *
 * Integers come back as JavaScript numbers on both (PostgreSQL's int8 and numeric are
 * converted; every integer this service stores is far below 2^53).
 *
 * Text is stored without U+0000 on both: see storedParams.
 */
import { Database, type SQLQueryBindings } from "bun:sqlite";
import { SQL } from "bun";

export type SqlValue = string | number | bigint | boolean | null | Uint8Array;
export type SqlDialect = "sqlite" | "postgres";

export interface RunResult {
  /** Rows inserted, updated or deleted. */
  changes: number;
}

/** Statements, inside or outside a transaction. */
export interface SqlQueries {
  readonly dialect: SqlDialect;
  all<T>(sql: string, params?: readonly SqlValue[]): Promise<T[]>;
  /** The first row, or null. */
  get<T>(sql: string, params?: readonly SqlValue[]): Promise<T | null>;
  run(sql: string, params?: readonly SqlValue[]): Promise<RunResult>;
}

export interface SqlClient extends SqlQueries {
  /**
   * Runs `fn` as one transaction: all or nothing. SQLite takes the write lock first
   * (BEGIN IMMEDIATE), so a transaction never deadlocks on upgrading its lock; PostgreSQL runs
   * READ COMMITTED, and statements that need it lock their rows (`FOR UPDATE`, conditional
   * updates). A lock conflict surfaces as an error `isRetryableConflict` recognises; the store's
   * `whenWritable` retries those.
   */
  transaction<T>(fn: (tx: SqlQueries) => Promise<T>): Promise<T>;
  /** Runs a script of several statements (migrations), no parameters. */
  exec(script: string): Promise<void>;
  close(): Promise<void>;
}

/** ` FOR UPDATE` on PostgreSQL (a row lock for the rest of the transaction); SQLite's write lock already covers it. */
export function forUpdate(q: SqlQueries): string {
  return q.dialect === "postgres" ? " FOR UPDATE" : "";
}

/**
 * The parameters as the store binds them, on both engines: U+0000 in a string becomes U+FFFD
 * (the replacement character). PostgreSQL refuses U+0000 in text ("invalid byte sequence for
 * encoding UTF8: 0x00"), and much of what the store writes quotes text nobody here controls (a
 * prompt, an upstream's error message, a webhook receiver's answer), so a refusal there failed
 * whatever wrote it: a refund, a batch of other users' chat rows. SQLite would keep U+0000, but
 * it is replaced there too, so a deployment stores and reads back the same text whichever
 * engine it runs on, and a lookup by a value holding U+0000 (an id, a cursor, a filter)
 * compares the same on both: it finds nothing, as for any unknown value (never the value cut
 * short). Text an older version wrote to SQLite with U+0000 is replaced when `migrate-store`
 * copies it to PostgreSQL (its INSERTs bind through here) rather than failing the copy. Bytes
 * (Uint8Array) are left alone. The same array comes back when no string holds U+0000 (nearly
 * always), so the usual statement copies nothing.
 */
export function storedParams(params: readonly SqlValue[]): readonly SqlValue[] {
  for (let i = 0; i < params.length; i++) {
    const p = params[i];
    if (typeof p === "string" && p.includes("\0")) return params.map((v) => (typeof v === "string" ? v.replaceAll("\0", "\uFFFD") : v));
  }
  return params;
}

// ---- SQLite ----------------------------------------------------------------------------------

/**
 * bun:sqlite behind the async interface. One connection serves the whole process, so while a
 * transaction is open (its callback awaits between statements) every other statement waits for
 * it: otherwise another request's statement would run inside it. The wait is a few microtasks,
 * because SQLite answers synchronously.
 */
export class SqliteClient implements SqlClient {
  readonly dialect = "sqlite" as const;
  private open: Promise<void> | null = null;
  private readonly tx: SqlQueries;

  constructor(readonly db: Database) {
    this.tx = {
      dialect: "sqlite",
      all: async <T>(sql: string, params: readonly SqlValue[] = []) => this.allNow<T>(sql, params),
      get: async <T>(sql: string, params: readonly SqlValue[] = []) => this.getNow<T>(sql, params),
      run: async (sql: string, params: readonly SqlValue[] = []) => this.runNow(sql, params),
    };
  }

  private allNow<T>(sql: string, params: readonly SqlValue[]): T[] {
    return this.db.query<T, SQLQueryBindings[]>(sql).all(...(storedParams(params) as SQLQueryBindings[]));
  }

  private getNow<T>(sql: string, params: readonly SqlValue[]): T | null {
    return this.db.query<T, SQLQueryBindings[]>(sql).get(...(storedParams(params) as SQLQueryBindings[])) ?? null;
  }

  private runNow(sql: string, params: readonly SqlValue[]): RunResult {
    return { changes: this.db.query(sql).run(...(storedParams(params) as SQLQueryBindings[])).changes };
  }

  // Each method below waits with `while (this.open) await this.open;` and then runs its
  // statement (or BEGIN) in the same synchronous step as the last check. Waiting through a helper
  // (`await this.idle()`) adds a hop after the check: two waiters woken by one COMMIT both pass
  // it, and the second then BEGINs inside the first's transaction ("cannot start a transaction
  // within a transaction") or runs its statement inside it.

  async all<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    while (this.open) await this.open;
    return this.allNow<T>(sql, params);
  }

  async get<T>(sql: string, params: readonly SqlValue[] = []): Promise<T | null> {
    while (this.open) await this.open;
    return this.getNow<T>(sql, params);
  }

  async run(sql: string, params: readonly SqlValue[] = []): Promise<RunResult> {
    while (this.open) await this.open;
    return this.runNow(sql, params);
  }

  async transaction<T>(fn: (tx: SqlQueries) => Promise<T>): Promise<T> {
    while (this.open) await this.open;
    // Fails at once with SQLITE_BUSY when another process holds the write lock (busy_timeout 0
    // while serving): nothing is held, and the caller's retry decides how long to wait.
    this.db.exec("BEGIN IMMEDIATE");
    let release!: () => void;
    this.open = new Promise<void>((r) => (release = r));
    try {
      const result = await fn(this.tx);
      this.db.exec("COMMIT");
      return result;
    } catch (e) {
      if (this.db.inTransaction) this.db.exec("ROLLBACK");
      throw e;
    } finally {
      this.open = null;
      release();
    }
  }

  async exec(script: string): Promise<void> {
    while (this.open) await this.open;
    this.db.exec(script);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

// ---- PostgreSQL ------------------------------------------------------------------------------

/** `?` → `$1, $2, …`, outside string literals, quoted names and comments. */
export function numberPlaceholders(sql: string): string {
  let out = "";
  let n = 0;
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      const end = sql.indexOf(c, i + 1);
      const stop = end < 0 ? sql.length : end;
      out += sql.slice(i, stop + 1);
      i = stop;
    } else if (c === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      const stop = end < 0 ? sql.length : end;
      out += sql.slice(i, stop);
      i = stop - 1;
    } else if (c === "?") {
      out += `$${++n}`;
    } else {
      out += c;
    }
  }
  return out;
}

const numbered = new Map<string, string>();
function pgText(sql: string): string {
  let text = numbered.get(sql);
  if (text === undefined) {
    text = numberPlaceholders(sql);
    if (numbered.size < 5000) numbered.set(sql, text);
  }
  return text;
}

/** int8 arrives as bigint (the client's `bigint: true`), numeric (SUM of int8) as a string: both become numbers. */
function normalizeRow<T>(row: Record<string, unknown>, numericColumns: Set<string> | null): T {
  for (const k in row) {
    const v = row[k];
    if (typeof v === "bigint") row[k] = Number(v);
    else if (numericColumns?.has(k) && typeof v === "string") row[k] = Number(v);
  }
  return row as T;
}

type PgResult = Record<string, unknown>[] & { count?: number | null; columns?: unknown };

function rowsOf<T>(result: PgResult): T[] {
  const rows: T[] = [];
  for (const row of result) rows.push(normalizeRow<T>({ ...row }, null));
  return rows;
}

/**
 * Params: strings without U+0000 (storedParams); Uint8Array → Buffer (bytea); booleans stay
 * booleans; numbers are sent as text and PostgreSQL casts them to the column's type.
 */
function pgParams(params: readonly SqlValue[]): unknown[] {
  return storedParams(params).map((p) => (p instanceof Uint8Array && !Buffer.isBuffer(p) ? Buffer.from(p.buffer, p.byteOffset, p.byteLength) : p));
}

function pgQueries(sql: SQL): SqlQueries {
  const q = async (text: string, params: readonly SqlValue[]) => (await sql.unsafe(pgText(text), pgParams(params))) as unknown as PgResult;
  return {
    dialect: "postgres",
    all: async <T>(text: string, params: readonly SqlValue[] = []) => rowsOf<T>(await q(text, params)),
    get: async <T>(text: string, params: readonly SqlValue[] = []) => {
      const rows = rowsOf<T>(await q(text, params));
      return rows[0] ?? null;
    },
    run: async (text: string, params: readonly SqlValue[] = []) => ({ changes: Number((await q(text, params)).count ?? 0) }),
  };
}

export interface PostgresOptions {
  /** Connections in the pool (each instance opens at most this many). */
  max?: number;
  /** How long a new connection may take before the statement fails (seconds). */
  connectionTimeoutS?: number;
}

/** A PostgreSQL pool through Bun's built-in client. */
export class PostgresClient implements SqlClient {
  readonly dialect = "postgres" as const;
  private readonly queries: SqlQueries;

  constructor(
    readonly sql: SQL,
  ) {
    this.queries = pgQueries(sql);
  }

  static connect(url: string, opts: PostgresOptions = {}): PostgresClient {
    const sql = new SQL({
      url,
      max: opts.max ?? 10,
      bigint: true,
      connectionTimeout: opts.connectionTimeoutS ?? 5,
      idleTimeout: 30,
      // Statements are prepared per connection by text; the pool is small, the texts are few.
      prepare: true,
      onconnect: undefined,
    });
    return new PostgresClient(sql);
  }

  all<T>(text: string, params?: readonly SqlValue[]): Promise<T[]> {
    return this.queries.all<T>(text, params);
  }

  get<T>(text: string, params?: readonly SqlValue[]): Promise<T | null> {
    return this.queries.get<T>(text, params);
  }

  run(text: string, params?: readonly SqlValue[]): Promise<RunResult> {
    return this.queries.run(text, params);
  }

  async transaction<T>(fn: (tx: SqlQueries) => Promise<T>): Promise<T> {
    return (await this.sql.begin(async (tx) => fn(pgQueries(tx as unknown as SQL)))) as T;
  }

  async exec(script: string): Promise<void> {
    await this.sql.unsafe(script).simple();
  }

  async close(): Promise<void> {
    await this.sql.close({ timeout: 2 });
  }
}

/** SQLSTATEs worth retrying unchanged: serialization failure, deadlock, lock not available. */
const PG_RETRYABLE = new Set(["40001", "40P01", "55P03"]);

/** A PostgreSQL error's SQLSTATE, however the client exposes it. */
export function postgresState(e: unknown): string | undefined {
  const err = e as { errno?: unknown; code?: unknown; sqlState?: unknown } | null;
  for (const v of [err?.errno, err?.sqlState, err?.code]) if (typeof v === "string" && /^[0-9A-Z]{5}$/.test(v)) return v;
  return undefined;
}

/**
 * The PostgreSQL server cannot be reached or dropped the connection (Bun's client codes, or the
 * SQLSTATE classes 08 "connection exception" and 57P0x "shut down / cannot connect now"): the
 * statement did not run, or its transaction was rolled back. The pool reconnects by itself.
 */
export function isDatabaseUnreachable(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === "string" && (code.startsWith("ERR_POSTGRES_CONNECTION") || code === "ERR_POSTGRES_IDLE_TIMEOUT" || code === "ERR_POSTGRES_LIFETIME_TIMEOUT")) return true;
  const state = postgresState(e);
  return state !== undefined && (state.startsWith("08") || state === "57P01" || state === "57P02" || state === "57P03");
}

export function isPostgresConflict(e: unknown): boolean {
  const s = postgresState(e);
  return s !== undefined && PG_RETRYABLE.has(s);
}

/**
 * A unique constraint or index refused the row (nothing was written): SQLite's
 * SQLITE_CONSTRAINT_UNIQUE / _PRIMARYKEY, PostgreSQL's SQLSTATE 23505.
 */
export function isUniqueViolation(e: unknown): boolean {
  if (postgresState(e) === "23505") return true;
  const code = (e as { code?: unknown } | null)?.code;
  return code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY";
}
