/**
 * Which backend this test run uses: `ATELIER_TEST_BACKEND=scaled` runs the suite on PostgreSQL
 * (a fresh database per server, copied from a migrated template) and Redis (one redis-server per
 * test process, a unique key prefix per server); unset or `embedded`, on SQLite and in-process
 * state as the default deployment does. Tests that only make sense on one backend say so through
 * `embeddedOnly(reason)` / `scaledOnly(reason)`, with the reason in the test's name.
 */
import { describe, test } from "bun:test";
import { startPostgres, type TestPostgres } from "./postgresServer";
import { startRedis, type TestRedis } from "./redisServer";

const chosen = process.env.ATELIER_TEST_BACKEND ?? "embedded";
if (chosen !== "embedded" && chosen !== "scaled") throw new Error(`ATELIER_TEST_BACKEND must be "embedded" or "scaled", not ${JSON.stringify(chosen)}`);

export const backend: "embedded" | "scaled" = chosen;
export const scaled = backend === "scaled";

/** `embeddedOnly("SQLite file locking").test(name, fn)`: skipped on the scaled pass, with why. */
export function embeddedOnly(reason: string) {
  return {
    test: (name: string, fn: () => unknown, timeout?: number) => test.skipIf(scaled)(`${name} [embedded only: ${reason}]`, fn as () => void, timeout),
    describe: (name: string, fn: () => void) => describe.skipIf(scaled)(`${name} [embedded only: ${reason}]`, fn),
  };
}

/** `scaledOnly("instances sharing one database").test(name, fn)`: skipped on the embedded pass, with why. */
export function scaledOnly(reason: string) {
  return {
    test: (name: string, fn: () => unknown, timeout?: number) => test.skipIf(!scaled)(`${name} [scaled only: ${reason}]`, fn as () => void, timeout),
    describe: (name: string, fn: () => void) => describe.skipIf(!scaled)(`${name} [scaled only: ${reason}]`, fn),
  };
}

let redis: Promise<TestRedis> | null = null;

/** The test process's one redis-server (scaled pass); stopped when the process exits. */
export function sharedRedis(): Promise<TestRedis> {
  redis ??= startRedis().then((r) => {
    // bun test does not always run exit handlers, and a live redis-server would hold the run's
    // stderr open: a watchdog kills it once this process is gone, however it ends.
    Bun.spawn(["setsid", "sh", "-c", `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; kill -9 ${r.pid} 2>/dev/null`], {
      stdin: "ignore",
      stdout: "ignore",
      stderr: "ignore",
    }).unref();
    return r;
  });
  return redis;
}

let prefixes = 0;

export interface ScaledBackend {
  databaseUrl: string;
  redisUrl: string;
  keyPrefix: string;
  /** Drops the database. */
  stop(): Promise<void>;
}

/** A fresh migrated PostgreSQL database and a fresh key prefix on this process's redis-server. */
export async function freshScaledBackend(): Promise<ScaledBackend> {
  const [pg, r]: [TestPostgres, TestRedis] = await Promise.all([startPostgres({ migrated: true }), sharedRedis()]);
  return {
    databaseUrl: pg.url,
    redisUrl: r.url,
    keyPrefix: `t${process.pid}_${++prefixes}_${crypto.randomUUID().slice(0, 8)}:`,
    stop: () => pg.stop(),
  };
}
