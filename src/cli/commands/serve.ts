/** `atelier serve`: the HTTP server, until SIGTERM or SIGINT. */
import { createLogger } from "../../logger";
import { startServer } from "../../server";
import { COMMON_HELP, noPositionals, parseCommand, positiveInteger } from "../args";
import { looseDirMode } from "../../store/privateFiles";
import { holdDataDir } from "../serverLock";
import { configFrom, type Io } from "../shared";

const USAGE = `Usage: atelier serve [--port N] [--host ADDR]

  --port N      port (or ATELIER_PORT; default 8080)
  --host ADDR   address (or ATELIER_HOST; default 0.0.0.0)

${COMMON_HELP}`;

/** Never resolves: the process ends with exit 0 once the first signal's graceful stop is done. */
export async function serveCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { port: { type: "string" }, host: { type: "string" } }, USAGE);
  if (values.help) return io.out(USAGE), 0;
  noPositionals("serve", positionals, USAGE);
  // 0 is allowed: the system picks a free port, and the "listening" log line names it.
  const port = values.port === undefined ? undefined : positiveInteger("--port", values.port, true);
  const config = configFrom(values, { port, host: values.host });
  // The data directory's lock comes first, before the database is migrated or a pending request
  // refunded as interrupted: those would be another live server's on the same directory. Held
  // until the process exits; `restore` and `migrate-store` refuse while it is.
  const lock = holdDataDir(config.server.data_dir, "stop it first, or give this server a data directory of its own (--data)");
  const logger = createLogger(undefined, config.server.log_format);
  let server;
  try {
    server = await startServer(config, logger);
  } catch (e) {
    lock.release();
    throw e;
  }
  // Told, not changed: the folder may serve more than Atelier (store/privateFiles.ts, looseDirMode).
  const loose = looseDirMode(config.server.data_dir);
  if (loose) logger.warn("the data directory is open to other local users; chmod 700 it", { data_dir: config.server.data_dir, mode: loose });
  // One stop serves every signal: a second SIGINT (an impatient Ctrl-C) neither logs again nor cuts the grace period short.
  let signalled = false;
  const stop = (signal: string) => {
    if (signalled) return;
    signalled = true;
    logger.info("signal received", { signal });
    server.stop().then(() => (lock.release(), process.exit(0)));
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  return new Promise<number>(() => {});
}
