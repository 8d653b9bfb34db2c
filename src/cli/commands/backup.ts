/**
 * `atelier backup <file>` and `atelier restore <file>`: an online copy of the database while a
 * server runs, and putting such a copy back while none does. Kept image files (data_dir/images)
 * and webhook-secrets.key are files beside the database, not in it: copy them too.
 */
import { chmodSync, copyFileSync, existsSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { databasePath } from "../../store/database";
import { copyDatabaseInto, inspectDatabase, sqliteOnlyRefusal } from "../../store/maintenance";
import { makePrivateDir, PRIVATE_FILE, tightenFile } from "../../store/privateFiles";
import { CliError, COMMON_HELP, parseCommand, UsageError } from "../args";
import { holdDataDir } from "../serverLock";
import { configWithoutUpstreamSecrets, storeDialect, type Io } from "../shared";

const BACKUP_USAGE = `Usage: atelier backup <file> [--force]

Writes a consistent copy of data_dir/atelier.db to <file> (SQLite VACUUM INTO), also while a
server runs. Kept images (data_dir/images) and webhook-secrets.key are not in it: copy them too.
SQLite only: with [database] url, back PostgreSQL up with its own tools (pg_dump).

  --force   replace <file> if it exists

${COMMON_HELP}`;

const RESTORE_USAGE = `Usage: atelier restore <file>

Replaces data_dir/atelier.db with the backup <file> after checking it (integrity, schema
version). Refused while a server runs on the data directory. The database it replaces is kept
beside it as atelier.db.before-restore-<time>. SQLite only, like backup.

${COMMON_HELP}`;

function onePath(command: string, positionals: string[], usage: string): string {
  if (positionals.length !== 1) throw new UsageError(`${command} takes one file name\n\n${usage}`);
  return resolve(positionals[0]!);
}

/** The backup's own checks: SQLite's integrity check, and a schema this binary can run. */
async function verifiedBackup(file: string) {
  let report;
  try {
    report = await inspectDatabase(file);
  } catch (e) {
    throw new CliError(`${file} is not a readable Atelier database: ${(e as Error).message}`);
  }
  if (report.integrity !== "ok") throw new CliError(`${file} fails SQLite's integrity check: ${report.integrity}`);
  if (report.schemaVersion === 0) throw new CliError(`${file} is not an Atelier database (no schema_migrations)`);
  if (report.schemaVersion > report.latestVersion) {
    throw new CliError(`${file} is at schema version ${report.schemaVersion}, but this binary knows only up to ${report.latestVersion}; restore it with a newer atelier`);
  }
  return report;
}

export async function backupCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { force: { type: "boolean" } }, BACKUP_USAGE);
  if (values.help) return io.out(BACKUP_USAGE), 0;
  const target = onePath("backup", positionals, BACKUP_USAGE);
  const config = configWithoutUpstreamSecrets(values);
  const refused = sqliteOnlyRefusal("backup", storeDialect(config));
  if (refused) throw new CliError(refused);
  const source = databasePath(config.server.data_dir);
  if (!existsSync(source)) throw new CliError(`no database at ${source}: check --data (or ATELIER_DATA)`);
  if (existsSync(target) && !values.force) throw new CliError(`${target} exists; pass --force to replace it`);
  if (target === source) throw new CliError(`${target} is the database itself`);
  makePrivateDir(dirname(target));
  // VACUUM INTO a temporary name, then rename: a reader never sees a half-written backup.
  const partial = `${target}.partial-${process.pid}`;
  rmSync(partial, { force: true });
  try {
    copyDatabaseInto(source, partial);
    const report = await verifiedBackup(partial);
    renameSync(partial, target);
    io.out(`backed up ${source} to ${target} (${statSync(target).size} bytes, schema version ${report.schemaVersion}, ${report.users} users)`);
    io.out("kept images (data_dir/images) and webhook-secrets.key are not in the backup: copy them too");
    return 0;
  } finally {
    rmSync(partial, { force: true });
  }
}

export async function restoreCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, {}, RESTORE_USAGE);
  if (values.help) return io.out(RESTORE_USAGE), 0;
  const backup = onePath("restore", positionals, RESTORE_USAGE);
  const config = configWithoutUpstreamSecrets(values);
  const refused = sqliteOnlyRefusal("restore", storeDialect(config));
  if (refused) throw new CliError(refused);
  const dataDir = config.server.data_dir;
  if (!existsSync(backup)) throw new CliError(`no file ${backup}`);
  // Held to the end: a server started meanwhile would open the database being replaced.
  const lock = holdDataDir(dataDir, "stop it first, then restore");
  let aside: string | undefined;
  const target = databasePath(dataDir);
  try {
    const report = await verifiedBackup(backup);
    if (report.ledgerMismatches.length > 0) io.err(`warning: users ${report.ledgerMismatches.join(", ")} have a balance that differs from their ledger (see atelier doctor)`);
    makePrivateDir(dataDir);
    // Copy next to the target first, so the final step is one rename on the same file system.
    const incoming = `${target}.restoring-${process.pid}`;
    copyFileSync(backup, incoming);
    // copyFile gives the copy the backup's mode, and a backup an older Atelier wrote is 0644.
    chmodSync(incoming, PRIVATE_FILE);
    try {
      if (existsSync(target)) {
        aside = `${target}.before-restore-${new Date().toISOString().replace(/[:.]/g, "-")}`;
        // The -wal file holds committed pages of the old database: it moves with it (same suffix).
        renameSync(target, aside);
        for (const suffix of ["-wal", "-shm"]) if (existsSync(target + suffix)) renameSync(target + suffix, aside + suffix);
        // Still the old database with all its secrets; one an older Atelier wrote may be 0644.
        for (const suffix of ["", "-wal", "-shm"]) tightenFile(aside + suffix);
      }
      renameSync(incoming, target);
    } finally {
      rmSync(incoming, { force: true });
    }
    io.out(`restored ${backup} into ${target} (schema version ${report.schemaVersion}, ${report.users} users)`);
  } finally {
    lock.release();
  }
  if (aside) io.out(`the previous database is kept as ${aside}`);
  return 0;
}
