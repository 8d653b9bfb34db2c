/**
 * A real listening server on a loopback port with its own temporary data directory, plus
 * helpers to make users and keys the way the CLI does. Logs are captured for assertions.
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import { loadConfig, type Config } from "../../src/config";
import { addUser, createKey } from "../../src/core/accounts";
import { createLogger } from "../../src/logger";
import { startServer, type RunningServer, type StartOptions } from "../../src/server";
import { freshScaledBackend, scaled, type ScaledBackend } from "./backend";
import { tempDir } from "./tempDirs";

export interface TestServer extends RunningServer {
  dataDir: string;
  logs: string[];
  /**
   * Environment for a CLI process working on this server's data: on the scaled pass, its
   * database and Redis (ATELIER_DATABASE_URL, ATELIER_REDIS_URL); empty on the embedded one.
   */
  childEnv: Record<string, string>;
  /**
   * Arguments that point an in-process `runCli` at this server's store: `--data`, and on the
   * scaled pass a `--config` file naming its database and Redis (runCli reads no environment).
   */
  cliArgs: string[];
  /** Creates a user with credits and an API key; returns the full key. */
  userWithKey(opts?: { email?: string; credits?: number; role?: "user" | "admin"; password?: string }): Promise<{ userId: number; email: string; key: string }>;
  balance(userId: number): Promise<number>;
  close(): Promise<void>;
}

let counter = 0;

const backends = new Map<string, { backend: Promise<ScaledBackend>; servers: number }>();

/**
 * The scaled backend of a data_dir: fresh for the first server on it, shared by every later one
 * (instances of one deployment, or the same one restarted).
 */
function scaledBackendFor(dataDir: string): Promise<ScaledBackend> {
  let entry = backends.get(dataDir);
  if (!entry) backends.set(dataDir, (entry = { backend: freshScaledBackend(), servers: 0 }));
  entry.servers++;
  return entry.backend;
}

/**
 * A server is done with its data_dir's backend. The database is dropped when no server uses it
 * and the data_dir was a temp dir of startTestServer's own (deleted with it, so no later server
 * can come back to it); a data_dir the test chose may see a restart: its database lives as long
 * as the process (whose PostgreSQL cluster goes with it).
 */
async function releaseScaledBackend(dataDir: string, ownTempDir: boolean): Promise<void> {
  const entry = backends.get(dataDir);
  if (!entry || --entry.servers > 0 || !ownTempDir) return;
  backends.delete(dataDir);
  await (await entry.backend).stop();
}

/** Writes a TOML config into a temp dir and loads it like the binary would. */
/** A config file naming the server's database and Redis, for an in-process CLI command on the scaled pass. */
function cliConfigFile(config: Config): string {
  const file = join(tempDir("atelier-cli-config-"), "atelier.toml");
  const lines = [`[database]`, `url = ${JSON.stringify(config.database.url)}`];
  if (config.redis.url) lines.push(`[redis]`, `url = ${JSON.stringify(config.redis.url)}`, `key_prefix = ${JSON.stringify(config.redis.key_prefix)}`);
  require("node:fs").writeFileSync(file, lines.join("\n") + "\n");
  return file;
}

export function configFromToml(toml: string, env: Record<string, string> = {}): Config {
  const dir = tempDir("atelier-config-");
  const file = join(dir, "atelier.toml");
  require("node:fs").writeFileSync(file, toml);
  return loadConfig({ file, env: { ...env } });
}

export async function startTestServer(
  opts: {
    toml?: string;
    env?: Record<string, string>;
    config?: (c: Config) => void;
    /** "embedded": SQLite and in-process state even on the scaled pass (a SQLite deployment under test, e.g. migrate-store's source). */
    backend?: "embedded";
  } & StartOptions = {},
): Promise<TestServer> {
  const dataDir = tempDir();
  const base = opts.toml !== undefined ? configFromToml(opts.toml, opts.env) : loadConfig({ env: {} });
  base.server.data_dir = dataDir;
  base.server.port = 0;
  base.server.host = "127.0.0.1";
  opts.config?.(base);
  // The scaled pass: a fresh PostgreSQL database and a key prefix of its own on the process's
  // redis-server, unless the test chose a database or Redis itself. Servers a test starts on one
  // data_dir are instances of one deployment: they share the database and the prefix.
  const shared = scaled && opts.backend !== "embedded" && base.database.url === undefined ? await scaledBackendFor(base.server.data_dir) : null;
  if (shared) {
    base.database.url = shared.databaseUrl;
    if (base.redis.url === undefined) {
      base.redis.url = shared.redisUrl;
      base.redis.key_prefix = shared.keyPrefix;
    }
  }
  const logs: string[] = [];
  let running: RunningServer;
  try {
    running = await startServer(base, createLogger((line) => logs.push(line)), { customize: opts.customize, clock: opts.clock });
  } catch (e) {
    if (shared) await releaseScaledBackend(base.server.data_dir, base.server.data_dir === dataDir);
    throw e;
  }
  const { store } = running.services;
  return {
    ...running,
    dataDir,
    logs,
    childEnv: shared ? { ATELIER_DATABASE_URL: base.database.url!, ...(base.redis.url ? { ATELIER_REDIS_URL: base.redis.url } : {}) } : {},
    cliArgs: ["--data", base.server.data_dir, ...(shared ? ["--config", cliConfigFile(base)] : [])],
    async userWithKey(o = {}) {
      const email = o.email ?? `user${++counter}-${Date.now()}@example.com`;
      const user = await addUser(store, Date.now, { email, credits: o.credits ?? 0, role: o.role, password: o.password });
      const { key } = await createKey(store, Date.now, user.id, "test");
      return { userId: user.id, email, key: key.secret };
    },
    async balance(userId: number) {
      return (await store.credits.balance(userId)) ?? Number.NaN;
    },
    async close() {
      await running.stop();
      if (shared) await releaseScaledBackend(base.server.data_dir, base.server.data_dir === dataDir);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
