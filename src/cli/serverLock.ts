/**
 * The data directory's lock: one process at a time may serve on a data directory, or restore
 * or migrate its database (`serve`, `restore`, `migrate-store`). Another `serve` on the same
 * directory would treat the live server's pending requests as interrupted and refund them at
 * start; a restore under a live server would rename its database away while it keeps writing.
 *
 * The lock is an exclusive SQLite lock on data_dir/atelier.lock.db (a database that holds
 * nothing), kept for the holder's whole life. SQLite takes it with POSIX advisory locks, which
 * the kernel drops when the process ends however it ends (SIGKILL, a crash, an OOM kill): there
 * is no stale lock to recognise, and none of a pid's pitfalls (a reused pid, or pid 1 in each of
 * two containers sharing the volume: the kernel sees one file). It holds wherever the file
 * system's locks reach its users (a local disk, a volume on one host; not every network file
 * system).
 *
 * data_dir/atelier.lock beside it only names the holder's pid, for the refusal message (and for
 * an older atelier, which read it as the lock): it is written once the lock is held and decides
 * nothing.
 */
import { Database } from "bun:sqlite";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { CliError } from "./args";
import { PRIVATE_FILE, ensurePrivateFile, makePrivateDir } from "../store/privateFiles";

export const lockDatabasePath = (dataDir: string) => join(dataDir, "atelier.lock.db");
export const lockPidPath = (dataDir: string) => join(dataDir, "atelier.lock");

/**
 * How long taking the lock waits for it: long enough for a doctor's probe (which holds it for
 * moments) never to turn a starting server away, short enough that a second server refuses at once.
 */
const ACQUIRE_WAIT_MS = 1_000;
/** A probe waits a little too, so two doctors at once do not each see the other as a server. */
const PROBE_WAIT_MS = 200;

export interface DataDirLock {
  /** Drops the lock (and the pid file naming this process); the process's end drops it too. */
  release(): void;
}

/** Who holds the lock: the pid it recorded, when it has (it may not have yet). */
export interface LockHolder {
  pid: number | undefined;
}

/**
 * Held connections, referenced for as long as they hold: bun:sqlite closes a Database the garbage
 * collector finds unreachable, and closing it drops the lock silently.
 */
const held = new Set<Database>();

const isBusy = (e: unknown) => (e as { code?: string }).code?.startsWith("SQLITE_BUSY") === true;

/** The exclusive lock on `file`, or undefined when another process holds it. */
function takeExclusive(file: string, waitMs: number, create: boolean): Database | undefined {
  let db: Database | undefined;
  try {
    db = new Database(file, { readwrite: true, create });
    db.exec(`PRAGMA busy_timeout = ${waitMs}`);
    // Its journal in memory: the lock database is never written, and a rollback journal file
    // would be created (and left by a killed holder) by BEGIN EXCLUSIVE on an empty database.
    db.exec("PRAGMA journal_mode = MEMORY");
    // Exclusive locking mode keeps the lock even if the transaction ended; the transaction,
    // never committed, is what takes it now (an EXCLUSIVE lock: no other connection can even read).
    db.exec("PRAGMA locking_mode = EXCLUSIVE");
    db.exec("BEGIN EXCLUSIVE");
    return db;
  } catch (e) {
    db?.close();
    if (isBusy(e)) return undefined;
    throw new CliError(`cannot lock ${file}: ${(e as Error).message}`);
  }
}

function recordedPid(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(lockPidPath(dataDir), "utf8").trim());
    // Our own pid there means the holder has not written its own yet.
    return Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Takes the data directory's lock for this process, or returns who holds it. A `:memory:` data
 * directory has no files to share and needs none.
 */
export function lockDataDir(dataDir: string): { lock: DataDirLock } | { holder: LockHolder } {
  if (dataDir === ":memory:") return { lock: { release() {} } };
  makePrivateDir(dataDir);
  // 0600 like everything else Atelier writes in the data directory (store/privateFiles.ts).
  ensurePrivateFile(lockDatabasePath(dataDir));
  const db = takeExclusive(lockDatabasePath(dataDir), ACQUIRE_WAIT_MS, true);
  if (!db) return { holder: { pid: recordedPid(dataDir) } };
  held.add(db);
  const pidFile = lockPidPath(dataDir);
  try {
    writeFileSync(pidFile, `${process.pid}\n`, { mode: PRIVATE_FILE });
  } catch {} // only the message's pid is lost
  let released = false;
  return {
    lock: {
      release() {
        if (released) return;
        released = true;
        // The pid file goes first, while the lock is still ours: after it, the next holder's is there.
        try {
          if (readFileSync(pidFile, "utf8").trim() === String(process.pid)) rmSync(pidFile, { force: true });
        } catch {}
        db.close();
        held.delete(db);
      },
    },
  };
}

/** What a refusal says: the data directory, who holds it, and what to do (`advice`). */
export function inUseMessage(dataDir: string, holder: LockHolder, advice: string): string {
  const dir = resolve(dataDir);
  const who = holder.pid === undefined ? "another atelier process" : `another atelier process (pid ${holder.pid})`;
  return `the data directory ${dir} is in use by ${who}: a server, restore or migrate-store holds ${lockDatabasePath(dir)}; ${advice}`;
}

/** The data directory's lock for this process, or a CliError naming the data directory and the holder. */
export function holdDataDir(dataDir: string, advice: string): DataDirLock {
  const attempt = lockDataDir(dataDir);
  if ("holder" in attempt) throw new CliError(inUseMessage(dataDir, attempt.holder, advice));
  return attempt.lock;
}

/**
 * Who holds the lock now, or undefined when nobody does (doctor): takes it for a moment when
 * free, without creating the file or recording a pid.
 */
export function dataDirHolder(dataDir: string): LockHolder | undefined {
  const file = lockDatabasePath(dataDir);
  if (dataDir === ":memory:" || !existsSync(file)) return undefined;
  try {
    const db = takeExclusive(file, PROBE_WAIT_MS, false);
    if (!db) return { pid: recordedPid(dataDir) };
    db.close();
  } catch {} // a file we cannot lock is for the doctor's other rows to explain, not this note
  return undefined;
}
