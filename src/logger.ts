/**
 * Structured logging: one event per line. "json" (the default) is one JSON object per line for a
 * log pipeline; "pretty" is one readable line per event for a human at a terminal. Callers never
 * pass secrets.
 */
import { writeSync } from "node:fs";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFormat = "json" | "pretty";

export interface Logger {
  log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Lines to standard output, gathered and written together: one write every `intervalMs` (or
 * once `maxBytes` are waiting) instead of one per line, so the access log costs the request
 * path a string append. Written synchronously (`writeSync`), so `flush()` and the flush at
 * process exit leave nothing behind; a crash loses at most the last interval's lines.
 */
export function batchedStdout(intervalMs = 20, maxBytes = 64 * 1024, fd = 1): { write(line: string): void; flush(): void } {
  let pending: string[] = [];
  let bytes = 0;
  let timer: ReturnType<typeof setTimeout> | null = null;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (pending.length === 0) return;
    const chunk = pending.join("");
    pending = [];
    bytes = 0;
    try {
      writeSync(fd, chunk);
    } catch {
      // A closed standard output must not take the server down; the lines are lost either way.
    }
  };
  process.on("exit", flush);
  return {
    write(line: string) {
      pending.push(line + "\n");
      bytes += line.length + 1;
      if (bytes >= maxBytes) return flush();
      if (!timer) {
        timer = setTimeout(flush, intervalMs);
        (timer as { unref?: () => void }).unref?.();
      }
    },
    flush,
  };
}

let stdoutLines: ReturnType<typeof batchedStdout> | undefined;
/** The process's one batched standard output (created on first use). */
export function stdoutSink(): ReturnType<typeof batchedStdout> {
  return (stdoutLines ??= batchedStdout());
}

let isoAt = Number.NaN;
let iso = "";
/** The current time as ISO 8601, formatted once per millisecond however many lines share it. */
function isoNow(): string {
  const now = Date.now();
  if (now !== isoAt) {
    isoAt = now;
    iso = new Date(now).toISOString();
  }
  return iso;
}

export function createLogger(write: (line: string) => void = (line) => stdoutSink().write(line), format: LogFormat = "json"): Logger {
  const log = (level: LogLevel, msg: string, fields: Record<string, unknown> = {}) => {
    const ts = isoNow();
    write(format === "pretty" ? prettyLine(ts, level, msg, fields) : jsonLine(ts, level, msg, fields));
  };
  return {
    log,
    info: (msg, fields) => log("info", msg, fields),
    warn: (msg, fields) => log("warn", msg, fields),
    error: (msg, fields) => log("error", msg, fields),
  };
}

/**
 * `{"ts":…,"level":…,"msg":…, …fields}`: the same text as stringifying `{ ts, level, msg, ...fields }`,
 * without copying the fields into a new object first (one copy per access-log line).
 */
export function jsonLine(ts: string, level: LogLevel, msg: string, fields: Record<string, unknown>): string {
  // A field named like the line's own replaces it in place, as the spread does.
  if ("ts" in fields || "level" in fields || "msg" in fields) return JSON.stringify({ ts, level, msg, ...fields });
  const head = `{"ts":"${ts}","level":"${level}","msg":${JSON.stringify(msg)}`;
  const rest = JSON.stringify(fields);
  return rest === "{}" ? `${head}}` : `${head},${rest.slice(1)}`;
}

/**
 * `2026-01-02T03:04:05.678Z INFO  request GET /v1/images/generations 200 812.4ms user_id=3 …`:
 * then every other field as key=value, values that are not plain words JSON-quoted, so a line
 * never breaks in two and stays greppable. A stack goes on the lines after it, indented.
 */
export function prettyLine(ts: string, level: LogLevel, msg: string, fields: Record<string, unknown>): string {
  const parts = [ts, level.toUpperCase().padEnd(5), msg];
  let rest = fields;
  if (msg === "request") {
    // The access log's leading fields, shown bare: `GET /v1/models 200 3.1ms`.
    const { method, path, status, duration_ms, ...others } = fields;
    parts.push(String(method ?? "-"), String(path ?? "-"), String(status ?? "-"), `${duration_ms ?? "-"}ms`);
    rest = others;
  }
  const { stack, ...shown } = rest;
  for (const [key, value] of Object.entries(shown)) {
    if (value === undefined || value === null) continue;
    parts.push(`${key}=${prettyValue(value)}`);
  }
  const line = parts.join(" ");
  return typeof stack === "string" ? `${line}\n${stack.replace(/^/gm, "    ")}` : line;
}

function prettyValue(value: unknown): string {
  if (typeof value === "string") return /^[\w.:/@+-]+$/.test(value) ? value : JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value) ?? String(value);
}

export const silentLogger: Logger = createLogger(() => {});
