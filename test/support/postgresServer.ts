/**
 * A real PostgreSQL for tests, on loopback. Each `startPostgres()` gives a FRESH database
 * (`t_<random>`), dropped by its `stop()`: empty, or with `{ migrated: true }` already at the
 * latest schema (copied from a template migrated once per process: a copy costs a few tens of
 * milliseconds where migrating costs a few hundred).
 *
 * Where the server comes from:
 * - `ATELIER_TEST_POSTGRES_URL` (a superuser URL of a server someone else runs, e.g. a CI service):
 *   the databases are made there;
 * - otherwise one throwaway cluster per test process: Debian's initdb into a temp dir (as the
 *   `postgres` OS user when root, since postgres refuses to run as root), fsync and synchronous
 *   commit off, a free loopback port, unix sockets in the temp dir, trust auth (loopback only,
 *   nothing in it outlives the run). It is stopped and deleted by a watchdog within a second of
 *   the process ending, however it ends (bun test runs no "exit" handlers; a plain Bun process
 *   that exits cleanly also does it at once).
 */
import { SQL } from "bun";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer } from "node:net";
import { PostgresClient } from "../../src/store/sql";
import { openPostgres } from "../../src/store/postgresDatabase";

export interface TestPostgres {
  /** URL of this test's own database (superuser, loopback). */
  url: string;
  /** The database's name, `t_<random>`. */
  database: string;
  /** A pool on this database (closed by stop()). */
  client(): PostgresClient;
  /** Closes the pools it handed out and drops the database. */
  stop(): Promise<void>;
}

interface Cluster {
  /** Superuser URL of the maintenance database (`postgres`), without a trailing path. */
  adminUrl: string;
  /** URL of another database on the same server. */
  urlOf(database: string): string;
}

/** initdb, pg_ctl and postgres: on the PATH, else Debian's /usr/lib/postgresql/<newest>/bin. */
export function postgresBinDir(): string {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (dir && existsSync(join(dir, "initdb")) && existsSync(join(dir, "pg_ctl"))) return dir;
  }
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(root, v, "bin", "initdb")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error("PostgreSQL's initdb was not found (run scripts/ensure-postgres.sh, or set ATELIER_TEST_POSTGRES_URL)");
  return join(root, versions[0]!, "bin");
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

const isRoot = process.getuid?.() === 0;

/** Runs a PostgreSQL binary as the OS user that owns the cluster. */
function asOwner(argv: string[]): string[] {
  return isRoot ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
}

interface Ran {
  exitCode: number | null;
  output: string;
}

/** Runs a command without blocking the event loop (initdb takes seconds on a loaded machine). */
async function run(argv: string[]): Promise<Ran> {
  const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { exitCode, output: `${stderr}${stdout}` };
}

function check(result: Ran, what: string): void {
  if (result.exitCode !== 0) throw new Error(`${what} failed (${result.exitCode}): ${result.output}`.slice(0, 4000));
}

async function startCluster(): Promise<Cluster> {
  const bin = postgresBinDir();
  const dir = mkdtempSync(join(tmpdir(), "atelier-pg-"));
  const data = join(dir, "data");
  const stopArgv = asOwner([join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop"]);
  const stopNow = () => {
    if (existsSync(join(data, "postmaster.pid"))) Bun.spawnSync(stopArgv, { stdout: "ignore", stderr: "ignore" });
    rmSync(dir, { recursive: true, force: true });
  };
  // From here on nothing outlives this process: the exit handler for a clean exit, a watchdog
  // for a process that is killed or crashes (it polls this pid, then stops the server and
  // deletes the directory), and a failed start cleans up at once.
  process.once("exit", stopNow);
  const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
  const watchdog = Bun.spawn(
    ["setsid", "sh", "-c", `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopArgv.map(quote).join(" ")} >/dev/null 2>&1; rm -rf ${quote(dir)}`],
    { stdin: "ignore", stdout: "ignore", stderr: "ignore" },
  );
  watchdog.unref();
  try {
    if (isRoot) {
      // The postgres user must own the cluster and reach it through the temp dir.
      const uid = Number(Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim());
      const gid = Number(Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim());
      if (!Number.isInteger(uid) || uid <= 0) throw new Error("running as root, but there is no `postgres` OS user to run PostgreSQL as");
      chownSync(dir, uid, gid);
    }
    chmodSync(dir, 0o700);
    check(await run(asOwner([join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])), "initdb");
    // The free port may be taken before the server binds it: a few tries, each with a new port.
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const settings = [
        "listen_addresses = '127.0.0.1'",
        `port = ${port}`,
        `unix_socket_directories = '${dir}'`,
        // A test cluster: losing it on a crash costs nothing, and every commit waiting for the disk would.
        "fsync = off",
        "synchronous_commit = off",
        "full_page_writes = off",
        "max_connections = 200",
        "shared_buffers = 32MB",
        "log_min_messages = warning",
        "logging_collector = off",
      ];
      // initdb made this file, owned by the cluster's user; writing keeps its owner.
      writeFileSync(join(data, "postgresql.auto.conf"), `${settings.join("\n")}\n`);
      const started = await run(asOwner([join(bin, "pg_ctl"), "-D", data, "-l", join(dir, "server.log"), "-w", "-t", "60", "start"]));
      if (started.exitCode === 0) {
        const base = `postgres://postgres@127.0.0.1:${port}`;
        return { adminUrl: `${base}/postgres`, urlOf: (db) => `${base}/${db}` };
      }
      if (attempt >= 3) {
        const log = existsSync(join(dir, "server.log")) ? readFileSync(join(dir, "server.log"), "utf8").slice(-2000) : "";
        check(started, `pg_ctl start (server log: ${log})`);
      }
    }
  } catch (e) {
    stopNow();
    throw e;
  }
}

function externalCluster(url: string): Cluster {
  const u = new URL(url);
  return {
    adminUrl: url,
    urlOf(db) {
      const v = new URL(u.href);
      v.pathname = `/${db}`;
      return v.href;
    },
  };
}

let cluster: Promise<Cluster> | null = null;
let admin: SQL | null = null;

function theCluster(): Promise<Cluster> {
  const external = process.env.ATELIER_TEST_POSTGRES_URL;
  cluster ??= external ? Promise.resolve(externalCluster(external)) : startCluster();
  return cluster;
}

async function adminSql(c: Cluster): Promise<SQL> {
  admin ??= new SQL({ url: c.adminUrl, max: 2, idleTimeout: 5, connectionTimeout: 30 });
  return admin;
}

const randomName = () => `t_${crypto.randomUUID().replaceAll("-", "").slice(0, 20)}`;

let template: Promise<string> | null = null;

/** A database migrated once per process, that migrated test databases are copied from (own cluster only). */
function migratedTemplate(c: Cluster, sql: SQL): Promise<string> {
  template ??= (async () => {
    const name = `${randomName()}_template`;
    await sql.unsafe(`CREATE DATABASE ${name}`);
    const client = await openPostgres(c.urlOf(name), { max: 1 });
    // A template must have no open connection while it is copied.
    await client.close();
    return name;
  })();
  return template;
}

export interface StartPostgresOptions {
  /** Already at the latest schema. */
  migrated?: boolean;
  /**
   * Written after `CREATE DATABASE <name>`, for a database unlike the cluster's default, e.g.
   * `TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'` (a non-C collation).
   */
  createOptions?: string;
}

export async function startPostgres(opts: StartPostgresOptions = {}): Promise<TestPostgres> {
  const c = await theCluster();
  const sql = await adminSql(c);
  const database = randomName();
  // On a server someone else runs, nothing may outlive the test: no shared template there.
  const external = process.env.ATELIER_TEST_POSTGRES_URL !== undefined;
  if (opts.migrated && !external && opts.createOptions === undefined) {
    const from = await migratedTemplate(c, sql);
    await sql.unsafe(`CREATE DATABASE ${database} TEMPLATE ${from}`);
  } else {
    await sql.unsafe(`CREATE DATABASE ${database}${opts.createOptions ? ` ${opts.createOptions}` : ""}`);
    if (opts.migrated) await (await openPostgres(c.urlOf(database), { max: 1 })).close();
  }
  const url = c.urlOf(database);
  const clients: PostgresClient[] = [];
  return {
    url,
    database,
    client() {
      const client = PostgresClient.connect(url, { max: 4 });
      clients.push(client);
      return client;
    },
    async stop() {
      for (const client of clients.splice(0)) await client.close();
      await sql.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    },
  };
}
