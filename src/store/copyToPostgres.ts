/**
 * Copies a SQLite deployment's database into an empty PostgreSQL database of the same schema
 * version (`atelier migrate-store`), all or nothing.
 *
 * Nothing here names a table: the tables, their columns and the order that satisfies their
 * foreign keys are read from both schemas, so a table a future migration adds is copied without
 * a change here. What the copier cannot copy faithfully it refuses before writing anything: a
 * table or column present on one side only, a column type it has no rule for, a cycle of
 * foreign keys, a schema version other than this binary's, a target that already holds rows.
 *
 * The copy is one PostgreSQL transaction (a failure leaves the target as empty as it was) read
 * from one SQLite read transaction (one committed state), streamed table by table in batches
 * bounded in rows and bytes, so memory stays bounded whatever the database's size. Before the
 * commit it checks what the service relies on: the same row count per table as the source, and
 * every balance equal to the sum of its ledger. Then the id sequences continue after the
 * copied ids.
 */
import { Database } from "bun:sqlite";
import { migrations } from "./migrations";
import type { SqlClient, SqlQueries, SqlValue } from "./sql";

/** The source's and target's bookkeeping table: each side keeps its own, never copied. */
const MIGRATIONS_TABLE = "schema_migrations";

/** How a PostgreSQL column's values are written; a type not listed here is refused. */
type ValueRule = "integer" | "real" | "text" | "bytes" | "boolean";

const PG_TYPE_RULES: Record<string, ValueRule> = {
  smallint: "integer",
  integer: "integer",
  bigint: "integer",
  numeric: "integer",
  "double precision": "real",
  real: "real",
  text: "text",
  "character varying": "text",
  character: "text",
  json: "text",
  jsonb: "text",
  bytea: "bytes",
  boolean: "boolean",
};

/** Which PostgreSQL rules take a STRICT SQLite column of each declared type. */
const SQLITE_TYPE_ACCEPTS: Record<string, ValueRule[]> = {
  INTEGER: ["integer", "boolean"],
  INT: ["integer", "boolean"],
  REAL: ["real"],
  TEXT: ["text"],
  BLOB: ["bytes"],
};

export interface CopyOptions {
  /** Rows per INSERT at most (PostgreSQL also caps parameters per statement at 65535). */
  batchRows?: number;
  /** Bytes of values per INSERT at most (approximate; blobs and text counted by length). */
  batchBytes?: number;
}

export interface TableCopy {
  table: string;
  rows: number;
}

export interface SequenceReset {
  table: string;
  column: string;
  /** The value the sequence's next nextval() returns. */
  next: number;
}

export interface CopyReport {
  /** The schema version both sides are at. */
  schemaVersion: number;
  /** In the order they were copied (parents before children). */
  tables: TableCopy[];
  sequences: SequenceReset[];
  /** Users whose balance was checked against their ledger (all of them). */
  balancesChecked: number;
}

/** The copy was refused or failed its checks; the target is unchanged. */
export class StoreCopyError extends Error {
  override name = "StoreCopyError";
}

interface ColumnPlan {
  name: string;
  rule: ValueRule;
}

interface TablePlan {
  name: string;
  columns: ColumnPlan[];
  /** The target has an identity column GENERATED ALWAYS: explicit ids need OVERRIDING SYSTEM VALUE. */
  overridingIdentity: boolean;
}

const quoteName = (name: string) => `"${name.replaceAll('"', '""')}"`;

const DEFAULT_BATCH_ROWS = 500;
const DEFAULT_BATCH_BYTES = 8 * 1024 * 1024;
/** PostgreSQL's limit on parameters in one statement (a 16-bit count). */
const PG_MAX_PARAMS = 65_535;

// ---- reading the two schemas -----------------------------------------------------------------

function sqliteVersions(source: Database): number[] {
  const has = source.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(MIGRATIONS_TABLE);
  if (!has) return [];
  return source.query<{ version: number }, []>(`SELECT version FROM ${MIGRATIONS_TABLE} ORDER BY version`).all().map((r) => r.version);
}

async function postgresVersions(target: SqlQueries): Promise<number[]> {
  const rows = await target.all<{ version: number }>(`SELECT version FROM ${MIGRATIONS_TABLE} ORDER BY version`);
  return rows.map((r) => r.version);
}

const sameList = (a: number[], b: number[]) => a.length === b.length && a.every((v, i) => v === b[i]);
const describeVersions = (v: number[]) => (v.length === 0 ? "none" : `${Math.max(...v)} (${v.length} migrations)`);

function sqliteTables(source: Database): string[] {
  return source
    .query<{ name: string }, [string]>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name != ? ORDER BY name")
    .all(MIGRATIONS_TABLE)
    .map((r) => r.name);
}

function sqliteColumns(source: Database, table: string): { name: string; type: string }[] {
  return source.query<{ name: string; type: string }, []>(`SELECT name, type FROM pragma_table_info(${quoteLiteral(table)})`).all();
}

function sqliteParents(source: Database, table: string): string[] {
  return source.query<{ table: string }, []>(`SELECT "table" FROM pragma_foreign_key_list(${quoteLiteral(table)})`).all().map((r) => r.table);
}

const quoteLiteral = (s: string) => `'${s.replaceAll("'", "''")}'`;

interface PgColumn {
  table_name: string;
  column_name: string;
  data_type: string;
  is_identity: string;
  identity_generation: string | null;
  column_default: string | null;
}

async function postgresColumns(target: SqlQueries): Promise<PgColumn[]> {
  return target.all<PgColumn>(
    `SELECT c.table_name, c.column_name, c.data_type, c.is_identity, c.identity_generation, c.column_default
       FROM information_schema.columns c
       JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
      WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' AND c.table_name != ?
      ORDER BY c.table_name, c.ordinal_position`,
    [MIGRATIONS_TABLE],
  );
}

async function postgresParents(target: SqlQueries): Promise<{ child: string; parent: string }[]> {
  return target.all<{ child: string; parent: string }>(
    `SELECT c.relname AS child, p.relname AS parent
       FROM pg_constraint k
       JOIN pg_class c ON c.oid = k.conrelid
       JOIN pg_class p ON p.oid = k.confrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE k.contype = 'f' AND n.nspname = current_schema()`,
  );
}

/**
 * Parents before children, by the foreign keys of both schemas (the target's constraints decide
 * what an INSERT needs; the source's say the same unless the schemas drifted). A table that
 * references itself is fine (rows go in rowid order); a longer cycle cannot be ordered.
 */
function parentsFirst(tables: string[], edges: { child: string; parent: string }[]): string[] {
  const parents = new Map(tables.map((t) => [t, new Set<string>()]));
  for (const { child, parent } of edges) if (child !== parent && parents.has(child) && parents.has(parent)) parents.get(child)!.add(parent);
  const order: string[] = [];
  const placed = new Set<string>();
  while (order.length < tables.length) {
    const ready = tables.filter((t) => !placed.has(t) && [...parents.get(t)!].every((p) => placed.has(p)));
    if (ready.length === 0) {
      const stuck = tables.filter((t) => !placed.has(t));
      throw new StoreCopyError(`the foreign keys between ${stuck.join(", ")} form a cycle: the copier cannot order them`);
    }
    for (const t of ready) {
      order.push(t);
      placed.add(t);
    }
  }
  return order;
}

/**
 * The tables to copy, in order, with each column's rule: refuses every difference between the
 * schemas, so nothing is skipped or converted by guess.
 */
async function planCopy(source: Database, target: SqlQueries): Promise<TablePlan[]> {
  const sourceTables = sqliteTables(source);
  const targetColumns = await postgresColumns(target);
  const byTable = new Map<string, PgColumn[]>();
  for (const c of targetColumns) byTable.set(c.table_name, [...(byTable.get(c.table_name) ?? []), c]);

  const problems: string[] = [];
  const onlySource = sourceTables.filter((t) => !byTable.has(t));
  const onlyTarget = [...byTable.keys()].filter((t) => !sourceTables.includes(t));
  if (onlySource.length) problems.push(`tables only in the SQLite database, unknown to the copier: ${onlySource.join(", ")}`);
  if (onlyTarget.length) problems.push(`tables only in the PostgreSQL database: ${onlyTarget.join(", ")}`);

  const plans = new Map<string, TablePlan>();
  for (const table of sourceTables.filter((t) => byTable.has(t))) {
    const pgColumns = new Map(byTable.get(table)!.map((c) => [c.column_name, c]));
    const columns: ColumnPlan[] = [];
    const sqliteNames = new Set<string>();
    for (const { name, type } of sqliteColumns(source, table)) {
      sqliteNames.add(name);
      const pg = pgColumns.get(name);
      if (!pg) {
        problems.push(`column ${table}.${name} is missing in PostgreSQL`);
        continue;
      }
      const rule = PG_TYPE_RULES[pg.data_type];
      if (!rule) {
        problems.push(`column ${table}.${name} has PostgreSQL type ${pg.data_type}, which the copier has no rule for`);
        continue;
      }
      if (!(SQLITE_TYPE_ACCEPTS[type.toUpperCase()] ?? []).includes(rule)) {
        problems.push(`column ${table}.${name} is ${type || "untyped"} in SQLite but ${pg.data_type} in PostgreSQL`);
        continue;
      }
      columns.push({ name, rule });
    }
    for (const name of pgColumns.keys()) if (!sqliteNames.has(name)) problems.push(`column ${table}.${name} is missing in SQLite`);
    const overridingIdentity = [...pgColumns.values()].some((c) => c.is_identity === "YES" && c.identity_generation === "ALWAYS");
    plans.set(table, { name: table, columns, overridingIdentity });
  }
  if (problems.length) throw new StoreCopyError(`the two schemas differ, nothing was copied:\n  ${problems.join("\n  ")}`);

  const edges = [
    ...(await postgresParents(target)),
    ...[...plans.keys()].flatMap((child) => sqliteParents(source, child).map((parent) => ({ child, parent }))),
  ];
  return parentsFirst([...plans.keys()], edges).map((t) => plans.get(t)!);
}

// ---- copying ---------------------------------------------------------------------------------

function targetValue(value: unknown, rule: ValueRule, where: string): SqlValue {
  if (value === null || value === undefined) return null;
  switch (rule) {
    case "boolean":
      if (value === 0 || value === 1) return value === 1;
      break;
    case "integer":
    case "real":
      if (typeof value === "number" || typeof value === "bigint") return value;
      break;
    case "text":
      if (typeof value === "string") return value;
      break;
    case "bytes":
      if (value instanceof Uint8Array) return value;
      break;
  }
  throw new StoreCopyError(`${where} holds ${typeof value} ${JSON.stringify(String(value).slice(0, 40))}, not a ${rule} value`);
}

/** What a value costs in an INSERT's parameters, roughly: enough to bound a batch. */
function valueBytes(value: SqlValue): number {
  if (value instanceof Uint8Array) return value.byteLength;
  if (typeof value === "string") return value.length * 3;
  return 8;
}

async function copyTable(source: Database, target: SqlQueries, plan: TablePlan, opts: Required<Pick<CopyOptions, "batchRows" | "batchBytes">>): Promise<number> {
  const names = plan.columns.map((c) => quoteName(c.name));
  const rowsPerBatch = Math.max(1, Math.min(opts.batchRows, Math.floor(PG_MAX_PARAMS / Math.max(1, names.length))));
  const head = `INSERT INTO ${quoteName(plan.name)} (${names.join(", ")})${plan.overridingIdentity ? " OVERRIDING SYSTEM VALUE" : ""} VALUES `;
  const tuple = `(${names.map(() => "?").join(", ")})`;
  let batch: SqlValue[] = [];
  let batchRows = 0;
  let batchBytes = 0;
  let copied = 0;
  const flush = async () => {
    if (batchRows === 0) return;
    const result = await target.run(head + Array.from({ length: batchRows }, () => tuple).join(", "), batch);
    if (result.changes !== batchRows) throw new StoreCopyError(`${plan.name}: ${batchRows} rows sent, ${result.changes} inserted`);
    copied += batchRows;
    batch = [];
    batchRows = 0;
    batchBytes = 0;
  };
  // rowid order: a table that references itself gets its parents first, and the order is stable.
  const rows = source.prepare<Record<string, unknown>, []>(`SELECT ${names.join(", ")} FROM ${quoteName(plan.name)} ORDER BY rowid`);
  try {
    for (const row of rows.iterate()) {
      for (const c of plan.columns) {
        const value = targetValue(row[c.name], c.rule, `${plan.name}.${c.name}`);
        batch.push(value);
        batchBytes += valueBytes(value);
      }
      batchRows++;
      if (batchRows >= rowsPerBatch || batchBytes >= opts.batchBytes) await flush();
    }
    await flush();
  } finally {
    rows.finalize();
  }
  return copied;
}

// ---- checking --------------------------------------------------------------------------------

async function checkRowCounts(source: Database, target: SqlQueries, tables: TableCopy[]): Promise<void> {
  const problems: string[] = [];
  for (const { table } of tables) {
    const expected = source.query<{ n: number }, []>(`SELECT COUNT(*) AS n FROM ${quoteName(table)}`).get()!.n;
    const actual = (await target.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM ${quoteName(table)}`))!.n;
    if (actual !== expected) problems.push(`${table}: ${expected} rows in SQLite, ${actual} in PostgreSQL`);
  }
  if (problems.length) throw new StoreCopyError(`row counts differ after the copy, nothing was kept:\n  ${problems.join("\n  ")}`);
}

/** Every user's balance equals the sum of their ledger rows, in the target. Returns how many users. */
async function checkBalances(target: SqlQueries): Promise<number> {
  const wrong = await target.all<{ id: number; credits: number; ledger: number }>(
    `SELECT u.id, u.credits, CAST(COALESCE(SUM(l.amount), 0) AS BIGINT) AS ledger
       FROM users u LEFT JOIN ledger l ON l.user_id = u.id
      GROUP BY u.id, u.credits
     HAVING u.credits != COALESCE(SUM(l.amount), 0)
      ORDER BY u.id LIMIT 10`,
  );
  if (wrong.length) {
    const list = wrong.map((w) => `user ${w.id}: balance ${w.credits}, ledger ${w.ledger}`).join("\n  ");
    throw new StoreCopyError(
      `balances differ from their ledgers, nothing was kept (\`atelier doctor\` shows the same on the SQLite database):\n  ${list}`,
    );
  }
  return (await target.get<{ n: number }>("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM users"))!.n;
}

// ---- sequences -------------------------------------------------------------------------------

/** Each column fed by a sequence (serial or identity) continues after the highest copied value. */
async function resetSequences(target: SqlQueries): Promise<SequenceReset[]> {
  const owned = await target.all<{ table_name: string; column_name: string; sequence: string }>(
    `SELECT c.table_name, c.column_name, pg_get_serial_sequence(quote_ident(c.table_name), c.column_name) AS sequence
       FROM information_schema.columns c
      WHERE c.table_schema = current_schema()
        AND pg_get_serial_sequence(quote_ident(c.table_name), c.column_name) IS NOT NULL
      ORDER BY c.table_name, c.column_name`,
  );
  const resets: SequenceReset[] = [];
  for (const { table_name: table, column_name: column, sequence } of owned) {
    const max = (await target.get<{ m: number | null }>(`SELECT CAST(MAX(${quoteName(column)}) AS BIGINT) AS m FROM ${quoteName(table)}`))!.m;
    const next = (max ?? 0) + 1;
    // is_called = false: the next nextval() returns `next` itself.
    await target.get("SELECT setval(CAST(? AS regclass), ?, false)", [sequence, next]);
    resets.push({ table, column, next });
  }
  return resets;
}

// ---- the whole copy --------------------------------------------------------------------------

/**
 * Copies `source` (a SQLite database at this binary's schema version, which nothing writes to
 * meanwhile) into `target` (a PostgreSQL database migrated to the same version, with no rows).
 * Throws StoreCopyError, with the target unchanged, when it refuses or a check fails.
 */
export async function copySqliteToPostgres(source: Database, target: SqlClient, opts: CopyOptions = {}): Promise<CopyReport> {
  const limits = { batchRows: opts.batchRows ?? DEFAULT_BATCH_ROWS, batchBytes: opts.batchBytes ?? DEFAULT_BATCH_BYTES };
  const known = [...new Set(migrations.map((m) => m.version))].sort((a, b) => a - b);
  const versionBefore = dataVersion(source);
  // One read transaction: every table is read from the same committed state.
  source.exec("BEGIN");
  let reading = true;
  try {
    const fromVersions = sqliteVersions(source);
    if (!sameList(fromVersions, known)) {
      throw new StoreCopyError(
        `the SQLite database is at schema version ${describeVersions(fromVersions)}, this binary's is ${describeVersions(known)}: ` +
          "run the atelier that wrote it (or start this one's server once on it to migrate it) before copying",
      );
    }
    const toVersions = await postgresVersions(target);
    if (!sameList(toVersions, known)) {
      throw new StoreCopyError(`the PostgreSQL database is at schema version ${describeVersions(toVersions)}, this binary's is ${describeVersions(known)}`);
    }
    return await target.transaction(async (tx) => {
      const plans = await planCopy(source, tx);
      // No other writer while the copy runs; an instance already busy on the target makes it
      // fail after a while instead of waiting for ever.
      await tx.run("SET LOCAL lock_timeout = '10s'");
      await tx.run(`LOCK TABLE ${plans.map((p) => quoteName(p.name)).join(", ")} IN EXCLUSIVE MODE`);
      const occupied: string[] = [];
      for (const p of plans) if (await tx.get(`SELECT 1 AS one FROM ${quoteName(p.name)} LIMIT 1`)) occupied.push(p.name);
      if (occupied.length) {
        throw new StoreCopyError(`the PostgreSQL database is not empty (rows in ${occupied.join(", ")}): migrate-store copies only into an empty database`);
      }
      const tables: TableCopy[] = [];
      for (const plan of plans) {
        const rows = await copyTable(source, tx, plan, limits);
        tables.push({ table: plan.name, rows });
      }
      await checkRowCounts(source, tx, tables);
      const balancesChecked = await checkBalances(tx);
      source.exec("COMMIT");
      reading = false;
      // Rows another process (a server started meanwhile, a CLI command) committed after the
      // snapshot would be missing from the copy: then nothing is kept.
      if (dataVersion(source) !== versionBefore) {
        throw new StoreCopyError("the SQLite database changed while it was copied (a server or a command wrote to it), nothing was kept: stop it and run again");
      }
      const sequences = await resetSequences(tx);
      return { schemaVersion: Math.max(0, ...known), tables, sequences, balancesChecked };
    });
  } finally {
    if (reading) source.exec("ROLLBACK");
  }
}

/** Changes whenever another connection commits to the database (SQLite's PRAGMA data_version). */
function dataVersion(source: Database): number {
  return source.query<{ data_version: number }, []>("PRAGMA data_version").get()!.data_version;
}

/**
 * The same, from the database file at `file`, opened read-only (never migrated: a database at
 * another schema version is refused, not changed).
 */
export async function copyDatabaseFileToPostgres(file: string, target: SqlClient, opts: CopyOptions = {}): Promise<CopyReport> {
  const source = new Database(file, { readonly: true, strict: true });
  try {
    source.exec("PRAGMA busy_timeout = 5000");
    return await copySqliteToPostgres(source, target, opts);
  } finally {
    source.close();
  }
}
