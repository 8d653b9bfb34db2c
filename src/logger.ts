/** Structured logging: one JSON object per line. Callers never pass secrets. */
export type LogLevel = "debug" | "info" | "warn" | "error";

export interface Logger {
  log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(write: (line: string) => void = (line) => process.stdout.write(line + "\n")): Logger {
  const log = (level: LogLevel, msg: string, fields: Record<string, unknown> = {}) =>
    write(JSON.stringify({ ts: new Date().toISOString(), level, msg, ...fields }));
  return {
    log,
    info: (msg, fields) => log("info", msg, fields),
    warn: (msg, fields) => log("warn", msg, fields),
    error: (msg, fields) => log("error", msg, fields),
  };
}

export const silentLogger: Logger = createLogger(() => {});
