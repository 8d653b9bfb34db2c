/**
 * `atelier doctor`: checks the configuration, the database, the data directory and every
 * upstream account, prints one row per check (check, status, detail — never a secret), and
 * exits 1 when any check fails. Nothing is changed: the database is opened read-only.
 */
import { accessSync, constants, existsSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Config } from "../../config";
import { AccountAuth, authorizationFor } from "../../engines/credentials";
import { queueAuthHeaders } from "../../engines/queue/auth";
import { joinUrl } from "../../engines/upstreamHttp";
import { databasePath } from "../../store/database";
import { inspectDatabase, inspectStore, type StoreReport } from "../../store/maintenance";
import { causeWithoutSecret, describePostgresUrl } from "../../store/postgresDatabase";
import { postgresMigrations } from "../../store/postgresMigrations";
import { looseDirMode, PRIVATE_FILE } from "../../store/privateFiles";
import { PostgresClient } from "../../store/sql";
import { S3ImageBlobs, s3BlobSettingsOf } from "../../store/s3ImageBlobs";
import { COMMON_HELP, noPositionals, parseCommand, positiveInteger } from "../args";
import { describeRedisUrl, probeRedis } from "../redisProbe";
import { dataDirHolder } from "../serverLock";
import { configFrom, type Io } from "../shared";

const USAGE = `Usage: atelier doctor [--timeout-ms N]

Checks the configuration, the database (integrity, migrations, credits against the ledger), the
data directory (writable, free space, closed to other users), the image bucket with [storage]
kind = "s3" (reachable, credentials accepted), Redis with [redis] url (answers PING) and each
upstream account (reachable, credentials accepted), prints a table, and exits 1 when a check
fails.

  --timeout-ms N   time limit for each call to an upstream, PostgreSQL, Redis or the bucket
                   (default 5000)

${COMMON_HELP}`;

type Status = "ok" | "warn" | "fail";
interface Check {
  check: string;
  status: Status;
  detail: string;
}

const MiB = 1024 * 1024;
/** Below these free bytes the data directory's check warns, and fails. */
const FREE_WARN = 1024 * MiB;
const FREE_FAIL = 100 * MiB;

export async function doctorCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { "timeout-ms": { type: "string" } }, USAGE);
  if (values.help) return io.out(USAGE), 0;
  noPositionals("doctor", positionals, USAGE);
  const timeoutMs = values["timeout-ms"] === undefined ? 5000 : positiveInteger("--timeout-ms", values["timeout-ms"]);
  const checks: Check[] = [];
  let config: Config | undefined;
  try {
    config = configFrom(values);
    checks.push({ check: "config", status: "ok", detail: `${values.config ?? process.env.ATELIER_CONFIG ?? "(no file: defaults and environment)"}; ${config.upstreams.length} upstreams, ${config.models.length} models` });
  } catch (e) {
    checks.push({ check: "config", status: "fail", detail: (e as Error).message });
  }
  if (config) {
    checks.push(...(await databaseChecks(config, timeoutMs)));
    checks.push(dataDirCheck(config.server.data_dir));
    if (config.storage.kind === "s3") checks.push(await imageBucketCheck(config.storage, timeoutMs));
    if (config.redis.url !== undefined) checks.push(await redisCheck(config.redis.url, timeoutMs));
    checks.push(...(await Promise.all(config.upstreams.flatMap((u) => u.accounts.map((a) => upstreamCheck(u, a, timeoutMs))))));
  }
  for (const line of table(checks)) io.out(line);
  const failed = checks.filter((c) => c.status === "fail").length;
  if (failed > 0) {
    io.err(`atelier doctor: ${failed} check${failed === 1 ? "" : "s"} failed`);
    return 1;
  }
  return 0;
}

/** The database the configuration names: SQLite in data_dir, or PostgreSQL with [database] url. */
function databaseChecks(config: Config, timeoutMs: number): Promise<Check[]> {
  return config.database.url === undefined ? sqliteChecks(config.server.data_dir) : postgresChecks(config.database.url, timeoutMs);
}

async function sqliteChecks(dataDir: string): Promise<Check[]> {
  const file = databasePath(dataDir);
  if (!existsSync(file)) return [{ check: "database", status: "fail", detail: `no database at ${file} (\`atelier user add\` or \`serve\` creates it)` }];
  let r;
  try {
    r = await inspectDatabase(file);
  } catch (e) {
    return [{ check: "database", status: "fail", detail: `${file}: ${(e as Error).message}` }];
  }
  // Informational: a server (or a restore or migrate-store) holding the data directory's lock.
  const holder = dataDirHolder(dataDir);
  const inUse = holder === undefined ? "" : holder.pid === undefined ? " (in use by a running atelier process)" : ` (in use by atelier pid ${holder.pid})`;
  return [
    { check: "database integrity", status: r.integrity === "ok" ? "ok" : "fail", detail: r.integrity === "ok" ? `${file}${inUse}` : r.integrity },
    ...storeChecks(r, r.latestVersion),
  ];
}

/**
 * PostgreSQL: the schema version and the ledger, read without migrating. Page integrity is the
 * server's own business (amcheck), so there is no integrity row; the URL is shown without its
 * credentials.
 */
async function postgresChecks(url: string, timeoutMs: number): Promise<Check[]> {
  const where = describePostgresUrl(url);
  const client = PostgresClient.connect(url, { max: 1, connectionTimeoutS: Math.max(1, Math.ceil(timeoutMs / 1000)) });
  try {
    const r = await inspectStore(client);
    return [{ check: "database", status: "ok", detail: `PostgreSQL ${where}` }, ...storeChecks(r, latestPostgresVersion())];
  } catch (e) {
    return [{ check: "database", status: "fail", detail: `PostgreSQL ${where}: ${causeWithoutSecret(e, url)}` }];
  } finally {
    await client.close().catch(() => undefined);
  }
}

function latestPostgresVersion(): number {
  return postgresMigrations.reduce((v, m) => Math.max(v, m.version), 0);
}

function storeChecks(r: StoreReport, latest: number): Check[] {
  return [
    r.schemaVersion > latest
      ? { check: "database migrations", status: "fail", detail: `schema version ${r.schemaVersion} is newer than this binary's ${latest}` }
      : r.schemaVersion < latest
        ? { check: "database migrations", status: "warn", detail: `schema version ${r.schemaVersion} of ${latest}; the next start migrates` }
        : { check: "database migrations", status: "ok", detail: `schema version ${r.schemaVersion} (latest)` },
    r.ledgerMismatches.length === 0
      ? { check: "ledger", status: "ok", detail: `every balance equals its ledger (${r.users} users)` }
      : { check: "ledger", status: "fail", detail: `balance differs from the ledger sum for user id${r.ledgerMismatches.length === 1 ? "" : "s"} ${r.ledgerMismatches.join(", ")}` },
  ];
}

function dataDirCheck(dataDir: string): Check {
  try {
    accessSync(dataDir, constants.W_OK);
    const probe = join(dataDir, `.doctor-${process.pid}`);
    writeFileSync(probe, "", { mode: PRIVATE_FILE });
    rmSync(probe);
    const fs = statfsSync(dataDir);
    const free = fs.bavail * fs.bsize;
    const loose = looseDirMode(dataDir);
    const detail = `${dataDir} writable, ${(free / MiB / 1024).toFixed(1)} GiB free${loose ? `; mode ${loose}: other local users can list it (chmod 700 it)` : ""}`;
    return { check: "data directory", status: free < FREE_FAIL ? "fail" : free < FREE_WARN || loose ? "warn" : "ok", detail };
  } catch (e) {
    return { check: "data directory", status: "fail", detail: `${dataDir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` };
  }
}

/** [storage] kind = "s3": one small authenticated call (a one-key listing) answers whether the bucket is there and takes the credentials. */
async function imageBucketCheck(storage: Config["storage"], timeoutMs: number): Promise<Check> {
  const settings = s3BlobSettingsOf(storage);
  const blobs = new S3ImageBlobs({ ...settings, timeoutMs: Math.min(timeoutMs, settings.timeoutMs) });
  try {
    await blobs.probe();
    return { check: "image storage", status: "ok", detail: `${blobs.describe()}: reachable, credentials accepted` };
  } catch (e) {
    // The message names the call and S3's error code (e.g. SignatureDoesNotMatch), never a credential.
    return { check: "image storage", status: "fail", detail: `${blobs.describe()}: ${(e as Error).message}` };
  }
}

/**
 * [redis] url: the server's /readyz answers 503 and every image and chat request gets 503
 * (gate_unavailable) while Redis does not answer, so a Redis that does not is a failure.
 */
async function redisCheck(url: string, timeoutMs: number): Promise<Check> {
  const where = describeRedisUrl(url);
  const r = await probeRedis(url, timeoutMs);
  if (r.ok) return { check: "redis", status: "ok", detail: `${where} answered PING in ${r.ms} ms` };
  return { check: "redis", status: "fail", detail: `${where}: ${r.why}; until it answers, the server is not ready and refuses image and chat requests (503)` };
}

type UpstreamConfig = Config["upstreams"][number];
type AccountConfig = UpstreamConfig["accounts"][number];

/** The cheapest authenticated call of each kind; `authenticated: false` where the API has none we know. */
function probeFor(u: UpstreamConfig, a: AccountConfig): { url: string; headers: Record<string, string>; authenticated: boolean } {
  const bearer = (): Record<string, string> => {
    const authorization = authorizationFor(a);
    return authorization ? { authorization } : {};
  };
  switch (u.kind) {
    case "openai":
      return { url: joinUrl(u.base_url, "/models"), headers: bearer(), authenticated: true };
    case "sdwebui":
      return { url: joinUrl(u.base_url, "/sdapi/v1/sd-models"), headers: bearer(), authenticated: true };
    case "comfyui":
      return { url: joinUrl(u.base_url, "/system_stats"), headers: bearer(), authenticated: true };
    case "gemini":
      return { url: joinUrl(u.base_url, "/v1beta/models?pageSize=1"), headers: new AccountAuth([a], "x-goog-api-key").headersFor(a.id), authenticated: true };
    case "replicate":
      return { url: joinUrl(u.base_url, "/v1/account"), headers: queueAuthHeaders("bearer", a), authenticated: true };
    case "bfl":
      return { url: joinUrl(u.base_url, "/v1/credits"), headers: queueAuthHeaders("x-key", a), authenticated: true };
    case "fal":
      // fal's queue has no cheap authenticated GET: only whether the host answers.
      return { url: u.base_url, headers: {}, authenticated: false };
  }
}

async function upstreamCheck(u: UpstreamConfig, a: AccountConfig, timeoutMs: number): Promise<Check> {
  const check = `upstream ${u.id}/${a.id}`;
  const probe = probeFor(u, a);
  const where = `${u.kind} ${new URL(probe.url).pathname}`;
  let res: Response;
  try {
    res = await fetch(probe.url, { headers: { accept: "application/json", ...probe.headers }, redirect: "manual", signal: AbortSignal.timeout(timeoutMs) });
    await res.body?.cancel();
  } catch (e) {
    const err = e as Error;
    const why = err.name === "TimeoutError" ? `no answer within ${timeoutMs} ms` : ((e as NodeJS.ErrnoException).code ?? err.name);
    return { check, status: "fail", detail: `unreachable (${where}): ${why}` };
  }
  if (!probe.authenticated) return { check, status: "warn", detail: `reachable (${where} answered ${res.status}); credentials not checked: ${u.kind} has no cheap authenticated call` };
  if (res.status === 401 || res.status === 403) return { check, status: "fail", detail: `credentials refused (${where} answered ${res.status})` };
  if (res.ok) return { check, status: "ok", detail: `reachable, credentials accepted (${where} answered ${res.status})` };
  return { check, status: "warn", detail: `reachable, but ${where} answered ${res.status}` };
}

/** Aligned columns for people; the status word is the second column for grep. */
function table(checks: Check[]): string[] {
  const rows = [{ check: "CHECK", status: "STATUS", detail: "DETAIL" }, ...checks];
  const w1 = Math.max(...rows.map((r) => r.check.length));
  const w2 = Math.max(...rows.map((r) => r.status.length));
  return rows.map((r) => `${r.check.padEnd(w1)}  ${r.status.padEnd(w2)}  ${r.detail}`.trimEnd());
}
