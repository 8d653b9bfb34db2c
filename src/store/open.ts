/**
 * Opens the configured store: PostgreSQL when [database] url (or ATELIER_DATABASE_URL) is set,
 * migrated before anything else touches it; otherwise SQLite in data_dir, as on first start.
 */
import type { Config } from "../config";
import { createStore, type Store } from "./index";
import { latestVersion, openDatabase } from "./database";
import { openPostgres } from "./postgresDatabase";
import { postgresMigrations } from "./postgresMigrations";
import type { SqlDialect } from "./sql";

/** Connections each instance opens to PostgreSQL at most (requests queue for one beyond it). */
const POSTGRES_POOL = 20;

export async function openStore(config: Config): Promise<Store> {
  const url = config.database.url;
  const opts = { instanceId: config.instance.id };
  if (url === undefined) return createStore(openDatabase(config.server.data_dir), latestVersion(), opts);
  const client = await openPostgres(url, { max: POSTGRES_POOL });
  return createStore(client, latestVersion(postgresMigrations), opts);
}

/** Where the deployment keeps its store: PostgreSQL with [database] url (or ATELIER_DATABASE_URL; several instances may share it), else SQLite in data_dir. */
export function storeDialect(config: Pick<Config, "database">): SqlDialect {
  return config.database.url === undefined ? "sqlite" : "postgres";
}
