#!/usr/bin/env bun
/**
 * The one binary: `atelier <command> [options]`. This file only dispatches: each command is one
 * file in cli/commands/, and every command takes --config and --data and works while a server
 * runs on the same data directory.
 */
import { COMMON_HELP, UsageError } from "./cli/args";
import { backupCommand, restoreCommand } from "./cli/commands/backup";
import { creditsCommand } from "./cli/commands/credits";
import { codesCommand } from "./cli/commands/codes";
import { doctorCommand } from "./cli/commands/doctor";
import { healthcheckCommand } from "./cli/commands/healthcheck";
import { keyCommand } from "./cli/commands/key";
import { migrateStoreCommand } from "./cli/commands/migrateStore";
import { openapiCommand } from "./cli/commands/openapi";
import { serveCommand } from "./cli/commands/serve";
import { upstreamsCommand } from "./cli/commands/upstreams";
import { userCommand } from "./cli/commands/user";
import { webhooksCommand } from "./cli/commands/webhooks";
import type { Command, Io } from "./cli/shared";
import { versionLine } from "./version";

// test/e2e/openapi.test.ts renders the document through this entry point.
export { renderOpenApi } from "./cli/commands/openapi";

const USAGE = `atelier — OpenAI-compatible image generation and chat in one binary

Usage: atelier <command> [options]
       atelier --version                  the version and the commit it was built from

Commands:
  serve                                   run the HTTP server
  user add <email> [--password P] [--admin] [--credits N]
  user list
  user password <email> --password P     set or replace the workbench password
  credits grant <email> <N> [--note TEXT]
  codes create --credits N --count M [--expires-days D] [--name TEXT]
                                          a batch of redemption codes, printed once as CSV
  key create <email> [--name NAME]        prints the full key alone on the last line
  key list <email>
  key revoke <prefix or key>
  upstreams [--json]                      upstream accounts: in-flight, capacity, state, recent failures
  upstreams enable <upstream> <account>   re-enable an account disabled after a 401/403
  openapi                                 print the OpenAPI document
  healthcheck                             exit 0 if the local server answers /healthz (for Docker)
  backup <file> [--force]                 consistent copy of the database, also while a server runs
  restore <file>                          put a backup in place (refused while a server runs)
  doctor [--timeout-ms N]                 check config, database, data directory and upstreams
  migrate-store [--to postgres://…]       copy the SQLite database into an empty PostgreSQL one, then check it
  webhooks forget-secrets --yes           drop every webhook signing secret (their sealing key is lost)

${COMMON_HELP}`;

// A Map, not an object literal: a word like "constructor" or "toString" must not find Object's methods.
const COMMANDS = new Map<string, Command>([
  ["serve", serveCommand],
  ["healthcheck", healthcheckCommand],
  ["user", userCommand],
  ["credits", creditsCommand],
  ["codes", codesCommand],
  ["key", keyCommand],
  ["upstreams", upstreamsCommand],
  ["openapi", openapiCommand],
  ["backup", backupCommand],
  ["restore", restoreCommand],
  ["doctor", doctorCommand],
  ["migrate-store", migrateStoreCommand],
  ["webhooks", webhooksCommand],
]);

const processIo: Io = { out: (line) => console.log(line), err: (line) => console.error(line) };

export async function runCli(argv: string[], io: Io = processIo): Promise<number> {
  const [command, ...rest] = argv;
  // Help asked for goes to stdout with success; no command at all is a usage error.
  if (!command) return io.err(USAGE), 2;
  if (command === "--help" || command === "-h" || command === "help") return io.out(USAGE), 0;
  if (command === "--version" || command === "-V" || command === "version") return io.out(versionLine()), 0;
  const run = COMMANDS.get(command);
  if (!run) {
    io.err(`atelier: unknown command '${command}'\n\n${USAGE}`);
    return 2;
  }
  try {
    return await run(rest, io);
  } catch (e) {
    // One line naming the command, whatever was thrown (a bad config file, a newer database, an
    // unknown user…); exit 2 when the command line itself is wrong, 1 when it could not be done.
    io.err(`atelier ${command}: ${e instanceof Error ? e.message : String(e)}`);
    return e instanceof UsageError ? 2 : 1;
  }
}

if (import.meta.main) {
  const code = await runCli(process.argv.slice(2));
  if (code !== 0) process.exit(code);
  // serve never resolves; other commands fall through and exit 0.
}
