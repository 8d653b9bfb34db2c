/**
 * What several commands need: the output channels, the configuration from --config/--data, the
 * store of a data directory that must already exist, and the formats of the listings.
 */
import { existsSync } from "node:fs";
import { loadConfig, type Config } from "../config";
import type { Store } from "../store";
import { databasePath } from "../store/database";
import { openStore, storeDialect } from "../store/open";
import { CliError } from "./args";

/** Where a command writes: the results to `out` (stdout), the problems to `err` (stderr). */
export interface Io {
  out: (line: string) => void;
  err: (line: string) => void;
}

/**
 * One CLI command: the words after its name in, the exit code out (0 done, 1 could not be done,
 * 2 the command line is wrong). It throws UsageError or CliError instead of printing them: the
 * dispatcher in main.ts prefixes the message with the command's name and picks the exit code.
 */
export type Command = (argv: string[], io: Io) => number | Promise<number>;

/** The two options every command takes (see COMMON_OPTIONS in ./args). */
export interface DataOptions {
  config?: string;
  data?: string;
}

export { storeDialect };

/** The configuration file (--config or ATELIER_CONFIG) and the environment, with --data and the given overrides on top. */
export function configFrom(options: DataOptions, overrides: { port?: number; host?: string } = {}): Config {
  return loadConfig({ file: options.config, overrides: { data_dir: options.data, ...overrides } });
}

/**
 * The same, for commands that never call an upstream (user, key, credits, openapi, healthcheck,
 * backup, restore):
 * an unset `${NAME}` in an upstream account is left unresolved instead of stopping the command.
 * Commands that call upstreams (serve, upstreams, doctor) use configFrom, which resolves all.
 */
export function configWithoutUpstreamSecrets(options: DataOptions): Config {
  return loadConfig({ file: options.config, overrides: { data_dir: options.data }, upstreamSecrets: "defer" });
}

/**
 * Runs fn on the database of config's data directory, which must exist, and closes it after.
 * Only `serve` and `user add` create a database: otherwise a mistyped --data would make a new
 * empty one and answer "no user with email …".
 */
export async function withExistingStore<T>(config: Config, fn: (store: Store) => T | Promise<T>): Promise<T> {
  if (storeDialect(config) === "sqlite") {
    const file = databasePath(config.server.data_dir);
    if (!existsSync(file)) {
      throw new CliError(`no database at ${file}: check --data (or ATELIER_DATA), or create the first user with \`atelier user add\``);
    }
  }
  const store = await openStore(config);
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

export async function requireUserByEmail(store: Store, email: string) {
  const user = await store.users.byEmail(email);
  if (!user) throw new CliError(`no user with email ${email}`);
  return user;
}

/** A listing's row: cells separated by tabs, so `cut -f` and spreadsheets read it. */
export const tabSeparated = (cells: (string | number)[]): string => cells.join("\t");

/** A stored time (epoch milliseconds) as ISO 8601 in UTC, or "-" for never. */
export const isoTimeOrDash = (ms: number | null): string => (ms === null ? "-" : new Date(ms).toISOString());
