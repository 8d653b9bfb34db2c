/** `atelier serve`: the HTTP server, until SIGTERM or SIGINT. */
import { createLogger } from "../../logger";
import { startServer } from "../../server";
import { COMMON_HELP, noPositionals, parseCommand, positiveInteger } from "../args";
import { looseDirMode } from "../../store/privateFiles";
import { holdServerLock } from "../serverLock";
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
  const logger = createLogger(undefined, config.server.log_format);
  const server = await startServer(config, logger);
  // data_dir/atelier.lock names this process while it serves: `atelier restore` refuses to run under it.
  const releaseLock = holdServerLock(config.server.data_dir);
  // Told, not changed: the folder may serve more than Atelier (store/privateFiles.ts, looseDirMode).
  const loose = looseDirMode(config.server.data_dir);
  if (loose) logger.warn("the data directory is open to other local users; chmod 700 it", { data_dir: config.server.data_dir, mode: loose });
  // One stop serves every signal: a second SIGINT (an impatient Ctrl-C) neither logs again nor cuts the grace period short.
  let signalled = false;
  const stop = (signal: string) => {
    if (signalled) return;
    signalled = true;
    logger.info("signal received", { signal });
    server.stop().then(() => (releaseLock(), process.exit(0)));
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  return new Promise<number>(() => {});
}
