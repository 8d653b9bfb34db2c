/**
 * Opens the PostgreSQL store ([database] url) and brings its schema up to date: the PostgreSQL
 * twin of database.ts, with the same schema_migrations table and the same rules (every
 * unrecorded migration in order; a database newer than this binary is refused).
 */
import { PostgresClient, postgresState, type PostgresOptions } from "./sql";
import { postgresMigrations } from "./postgresMigrations";
import { DatabaseTooNewError, refuseNewerDatabase, unappliedMigrations } from "./database";
import type { Migration } from "./migrations";
import { serverAddress, withheldIfHoldsPassword } from "../core/serverUrls";

/** The store could not be reached or set up; the message names the server, never its password. */
export class DatabaseUnavailableError extends Error {
  override name = "DatabaseUnavailableError";
}

/** `host:port/database` of a postgres:// URL: what an operator needs to find it, without the credentials. */
export function describePostgresUrl(url: string): string {
  return serverAddress(url) ?? "(an unparsable postgres:// URL)";
}

/** The driver's words, unless they contain the password (core/serverUrls), with its SQLSTATE or error code. */
export function causeWithoutSecret(e: unknown, url: string): string {
  const text = withheldIfHoldsPassword(e instanceof Error ? e.message : String(e), url);
  const state = postgresState(e);
  const code = (e as { code?: unknown } | null)?.code;
  if (state) return `${text} (SQLSTATE ${state})`;
  return typeof code === "string" && /^ERR_[A-Z_]+$/.test(code) ? `${text} (${code})` : text;
}

/**
 * One key for every Atelier that migrates this database: the migrating transaction holds it,
 * so instances starting together migrate once and the others then find nothing to do.
 */
const MIGRATION_LOCK = "hashtext('atelier schema_migrations')";

export async function postgresSchemaVersion(client: PostgresClient): Promise<number> {
  const row = await client.get<{ v: number | null }>("SELECT MAX(version) AS v FROM schema_migrations");
  return row?.v ?? 0;
}

/** Applies every migration the database has not recorded, in one transaction under the migration lock. */
export async function migratePostgres(client: PostgresClient, list: Migration[] = postgresMigrations): Promise<void> {
  await client.sql.begin(async (tx) => {
    await tx.unsafe(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`);
    await tx.unsafe("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)");
    const applied = ((await tx.unsafe("SELECT version FROM schema_migrations")) as { version: number }[]).map((r) => Number(r.version));
    refuseNewerDatabase(Math.max(0, ...applied), list);
    for (const m of unappliedMigrations(applied, list)) {
      await tx.unsafe(m.sql).simple();
      await tx.unsafe("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)", [m.version, m.name, Date.now()]);
    }
  });
}

/**
 * Connects to the PostgreSQL at `url` and migrates it. Fails with DatabaseUnavailableError
 * (naming host, port and database, never the password) when it cannot; DatabaseTooNewError as is.
 */
export async function openPostgres(url: string, opts: PostgresOptions = {}, list: Migration[] = postgresMigrations): Promise<PostgresClient> {
  let client: PostgresClient;
  try {
    client = PostgresClient.connect(url, opts);
  } catch (e) {
    throw new DatabaseUnavailableError(`cannot open PostgreSQL at ${describePostgresUrl(url)}: ${causeWithoutSecret(e, url)}`);
  }
  try {
    await migratePostgres(client, list);
    return client;
  } catch (e) {
    await client.close().catch(() => undefined);
    if (e instanceof DatabaseTooNewError) throw e;
    throw new DatabaseUnavailableError(`cannot open or migrate PostgreSQL at ${describePostgresUrl(url)}: ${causeWithoutSecret(e, url)}`);
  }
}
