/**
 * Another process (a CLI command, a backup, a second server) can hold SQLite's write lock for a
 * while. bun:sqlite is synchronous, so waiting inside SQLite (busy_timeout) would freeze the
 * whole server for that long. Instead the server's connection has no busy timeout: a write
 * that meets the lock fails at once with SQLITE_BUSY, and the request path retries it here,
 * asynchronously, with backoff, while every other request goes on.
 */

import { DatabaseBusyError, type WriteAttempt } from "../core/store";
import { isDatabaseUnreachable, isPostgresConflict } from "./sql";

/** busy_timeout of the server's connection while it serves (the CLI keeps SQLite's waiting). */
export const SERVING_BUSY_TIMEOUT_MS = 0;

/** SQLITE_BUSY and its extended codes (SQLITE_BUSY_SNAPSHOT, …) from bun:sqlite. */
export function isDatabaseBusy(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && (code === "SQLITE_BUSY" || code.startsWith("SQLITE_BUSY_") || code === "SQLITE_LOCKED");
}

/**
 * A write that met another writer and may succeed unchanged when tried again: SQLite's lock
 * (another process), or PostgreSQL's serialization failure or deadlock (another instance).
 */
export function isWriteConflict(e: unknown): boolean {
  return isDatabaseBusy(e) || isPostgresConflict(e);
}

export interface BusyRetryOptions {
  /** Give up (DatabaseBusyError) after this long; Infinity retries until it lands. */
  maxWaitMs: number;
  sleep?: (ms: number) => Promise<void>;
  now?: () => number;
}

/**
 * Runs `write` (one transaction, all or nothing) until it does not meet another writer
 * (isWriteConflict). Any other error is thrown at once. Backoff doubles from 2 ms to 250 ms, with jitter so that
 * waiting requests do not retry in lockstep.
 */
export async function retryWhileBusy<T>(write: (attempt: WriteAttempt) => T | Promise<T>, opts: BusyRetryOptions): Promise<T> {
  const sleep = opts.sleep ?? ((ms: number) => Bun.sleep(ms));
  const now = opts.now ?? (() => performance.now());
  const started = now();
  let delay = 2;
  // Once a run lost its connection, every later run is told: that one may have committed.
  const attempt: WriteAttempt = { mayHaveLanded: false };
  for (;;) {
    try {
      return await write(attempt);
    } catch (e) {
      // The database unreachable: a request's own write (bounded wait) fails at once, so the
      // client gets its 503 now rather than after the wait; the record of finished work
      // (unbounded) keeps retrying, so a success or a refund lands once the database is back.
      const unreachable = isDatabaseUnreachable(e);
      if (unreachable ? opts.maxWaitMs !== Infinity : !isWriteConflict(e)) throw e;
      if (unreachable) attempt.mayHaveLanded = true;
      const waited = now() - started;
      if (waited >= opts.maxWaitMs) throw new DatabaseBusyError(waited);
      await sleep(Math.min(delay * (0.5 + Math.random()), Math.max(1, opts.maxWaitMs - waited)));
      delay = Math.min(delay * 2, unreachable ? 1000 : 250);
    }
  }
}
