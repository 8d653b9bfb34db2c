/**
 * `atelier migrate-store --to postgres://…`: copies the SQLite deployment of a data directory
 * into an empty PostgreSQL database (migrated first to this binary's schema), checks it, and
 * says what it did. Refused while a server runs on the data directory: rows it wrote after the
 * copy began would be left behind.
 */
import { existsSync } from "node:fs";
import { copyDatabaseFileToPostgres, StoreCopyError, type CopyReport } from "../../store/copyToPostgres";
import { databasePath } from "../../store/database";
import { causeWithoutSecret, describePostgresUrl, openPostgres } from "../../store/postgresDatabase";
import { CliError, COMMON_HELP, noPositionals, parseCommand, UsageError } from "../args";
import { holdDataDir } from "../serverLock";
import { configWithoutUpstreamSecrets, type Io } from "../shared";

const USAGE = `Usage: atelier migrate-store [--to postgres://USER:PASSWORD@HOST:PORT/DATABASE]

Copies every table of data_dir/atelier.db into an empty PostgreSQL database, in one
transaction (a failure leaves it empty), after migrating it to this binary's schema. Then
checks that each table has as many rows as the source and every balance equals its ledger,
and makes the id sequences continue after the copied ids. Stop the server first; the SQLite
database is only read. Kept image files (data_dir/images) and webhook-secrets.key stay where
they are: the instances that use the PostgreSQL database need them too.

  --to URL   the PostgreSQL database (postgres:// or postgresql://); its password is never
             printed. Default: the configured [database] url (or ATELIER_DATABASE_URL), which
             keeps the password out of the command line

${COMMON_HELP}`;

function targetUrl(raw: string | undefined): string {
  if (!raw) throw new UsageError(`migrate-store needs --to postgres://… (or [database] url, or ATELIER_DATABASE_URL)\n\n${USAGE}`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`--to must be a postgres:// URL, got something that is not a URL\n\n${USAGE}`);
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new UsageError(`--to must be a postgres:// or postgresql:// URL, got a ${url.protocol}// one\n\n${USAGE}`);
  }
  return raw;
}

/** The summary: one line per table, the sequences, and the checks that passed. */
function printReport(report: CopyReport, io: Io): void {
  const width = Math.max(...report.tables.map((t) => t.table.length));
  for (const t of report.tables) io.out(`  ${t.table.padEnd(width)}  ${String(t.rows).padStart(9)} row${t.rows === 1 ? "" : "s"}`);
  const rows = report.tables.reduce((sum, t) => sum + t.rows, 0);
  if (report.sequences.length > 0) io.out(`sequences continue at: ${report.sequences.map((s) => `${s.table}.${s.column} ${s.next}`).join(", ")}`);
  io.out(`check: ${report.tables.length} tables, ${rows} rows, the same counts as the SQLite database`);
  io.out(`check: ${report.balancesChecked} user balance${report.balancesChecked === 1 ? "" : "s"} equal to their ledger`);
}

export async function migrateStoreCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { to: { type: "string" } }, USAGE);
  if (values.help) return io.out(USAGE), 0;
  noPositionals("migrate-store", positionals, USAGE);
  const config = configWithoutUpstreamSecrets(values);
  const url = targetUrl(values.to ?? config.database.url);
  const dataDir = config.server.data_dir;
  const file = databasePath(dataDir);
  if (!existsSync(file)) throw new CliError(`no database at ${file}: check --data (or ATELIER_DATA)`);
  // Held to the end: rows a server started meanwhile wrote after the copy began would be left behind.
  const lock = holdDataDir(dataDir, "stop it first, then copy");

  const where = describePostgresUrl(url);
  try {
    const target = await openPostgres(url, { max: 1 });
    try {
      io.out(`copying ${file} into PostgreSQL at ${where}`);
      let report: CopyReport;
      try {
        report = await copyDatabaseFileToPostgres(file, target);
      } catch (e) {
        if (e instanceof StoreCopyError) throw new CliError(e.message);
        throw new CliError(`the copy failed and was rolled back, nothing was kept: ${causeWithoutSecret(e, url)}`);
      }
      printReport(report, io);
      io.out(`done: schema version ${report.schemaVersion}; point the instances at it with [database] url (or ATELIER_DATABASE_URL)`);
      return 0;
    } finally {
      await target.close();
    }
  } finally {
    lock.release();
  }
}
