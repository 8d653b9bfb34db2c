/**
 * What the chat benches (proxy-compare.ts, floor.ts) share: processes pinned to one core, wrk
 * runs with the CPU the process under test spent per request (from /proc), medians, and an
 * `atelier serve` from the source with a real user and key on an OpenAI-compatible upstream.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Database } from "bun:sqlite";

/** The mock upstream and the bare proxy (run as `bun <CHAT_SERVERS> mock|proxy <url>`). */
export const CHAT_SERVERS = join(import.meta.dir, "chatServers.ts");

/** `--name=value` from the command line, or `fallback`. */
export const benchArg = (name: string, fallback: string): string =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;

export type Spawned = ReturnType<typeof Bun.spawn>;

export interface WrkResult {
  /** CPU time (user + system) the process under test spent per answered request, in µs. */
  cpuUs: number;
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
}

export function requireWrk(): void {
  if (!Bun.which("wrk")) throw new Error("wrk is missing: apt-get install -y wrk");
}

/** Starts a process on one core and waits for the port it prints ("port N") or logs ("listening"). */
export async function startPinned(core: number, argv: string[], logFile?: string, gcLogFile?: string): Promise<{ proc: Spawned; port: number }> {
  // With a GC log file, the collector logs there (JavaScriptCore's log goes to stderr).
  const proc = Bun.spawn(["taskset", "-c", String(core), ...argv], {
    stdout: logFile ? Bun.file(logFile) : "pipe",
    stderr: gcLogFile ? Bun.file(gcLogFile) : "inherit",
    env: gcLogFile ? { ...process.env, BUN_JSC_logGC: "1" } : process.env,
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    const text = logFile ? readFileSync(logFile, "utf8") : await firstLine(proc.stdout as ReadableStream<Uint8Array>);
    const port = /port (\d+)/.exec(text)?.[1] ?? /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(text)?.[1];
    if (port) return { proc, port: Number(port) };
    if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`${argv.join(" ")} did not start: ${text}`);
    await Bun.sleep(100);
  }
}

async function firstLine(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.getReader();
  const { value } = await reader.read();
  reader.releaseLock();
  return new TextDecoder().decode(value);
}

/** SIGTERM, then waits (at most 15 s) for the process to finish its graceful stop. */
export async function stopProcess(proc: Spawned): Promise<void> {
  proc.kill("SIGTERM");
  await Promise.race([proc.exited, Bun.sleep(15_000)]);
}

/** User + system CPU time of a process so far, in µs (from /proc; clock ticks of 10 ms). */
export function cpuTimeUs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / 100;
}

/** A wrk script that POSTs `body` as JSON with a Bearer key. */
export function writePostScript(path: string, body: string, key: string): void {
  writeFileSync(
    path,
    `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer ${key}"\n`,
  );
}

/** One wrk run on core 1 (one thread); with `pid`, the CPU that process spent per answered request. */
export async function wrk(url: string, script: string, connections: number, seconds: number, pid?: number): Promise<WrkResult> {
  const cpuBefore = pid ? cpuTimeUs(pid) : 0;
  const r = Bun.spawnSync(["taskset", "-c", "1", "wrk", "-t", "1", "-c", String(connections), "-d", `${seconds}s`, "--latency", "-s", script, url]);
  const out = r.stdout.toString();
  const ms = (label: string) => {
    const m = new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s)\\s*$`, "m").exec(out);
    if (!m) throw new Error(`wrk output without ${label}:\n${out}\n${r.stderr.toString()}`);
    return Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1);
  };
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  return {
    cpuUs: pid && requests > 0 ? (cpuTimeUs(pid) - cpuBefore) / requests : 0,
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0),
    p50: ms("50%"),
    p99: ms("99%"),
    requests,
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
    errors: errors ? errors.slice(1).reduce((s, n) => s + Number(n), 0) : 0,
  };
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/** Each figure's median over the rounds. */
export function medianResult(rs: WrkResult[]): WrkResult {
  const m = (f: (r: WrkResult) => number) => median(rs.map(f));
  return { cpuUs: m((r) => r.cpuUs), rps: m((r) => r.rps), p50: m((r) => r.p50), p99: m((r) => r.p99), requests: m((r) => r.requests), non2xx: m((r) => r.non2xx), errors: m((r) => r.errors) };
}

export interface BenchAtelier {
  proc: Spawned;
  port: number;
  /** The API key made with the CLI (a real user's). */
  key: string;
  /** Where `atelier serve` writes its stdout (the access log). */
  logFile: string;
  /** Where its collector's log goes (stderr, BUN_JSC_logGC=1): see support/gcLog. */
  gcLogFile: string;
}

/** The chat model Atelier offers on the mock (its request body's `model`). */
export const ATELIER_CHAT_MODEL = "mock-chat";

/**
 * `atelier serve` from this source tree on core 0, data in `dir`: an `openai` upstream on the
 * mock, a real user and key made with the CLI, request logging on (stdout to a file) and the
 * history written, its collector's log in a file. The gateway's own limits must not be what is
 * measured: enough chat slots and account capacity for c=64.
 */
export async function startAtelier(dir: string, mockPort: number): Promise<BenchAtelier> {
  const repo = join(import.meta.dir, "../..");
  const config = join(dir, "atelier.toml");
  writeFileSync(
    config,
    `[server]\nhost = "127.0.0.1"\nlog_requests = true\n\n[limits]\nchat_concurrency = 256\n\n` +
      `[[upstreams]]\nid = "mock"\nkind = "openai"\nbase_url = "http://127.0.0.1:${mockPort}/v1"\n` +
      `accounts = [ { id = "a", api_key = "sk-mock-secret", max_concurrency = 256 } ]\n\n` +
      `[[models]]\nid = "${ATELIER_CHAT_MODEL}"\nkind = "chat"\nupstream = "mock"\nupstream_model = "mock-model"\n`,
  );
  const cli = (...args: string[]) => {
    const r = Bun.spawnSync([process.execPath, join(repo, "src/main.ts"), ...args, "--config", config, "--data", dir], { cwd: dir });
    if (r.exitCode !== 0) throw new Error(`atelier ${args.join(" ")}: ${r.stderr.toString()}`);
    return r.stdout.toString().trimEnd().split("\n").at(-1)!;
  };
  cli("user", "add", "bench@example.com");
  const key = cli("key", "create", "bench@example.com", "--name", "bench");
  const logFile = join(dir, "atelier.log");
  const gcLogFile = join(dir, "atelier-gc.log");
  const { proc, port } = await startPinned(0, [process.execPath, join(repo, "src/main.ts"), "serve", "--config", config, "--data", dir, "--port", "0"], logFile, gcLogFile);
  return { proc, port, key, logFile, gcLogFile };
}

/**
 * What Atelier promises while it is fast, read after its graceful stop: succeeded chat rows in
 * the history, and access-log lines for chat (answered 200, and others).
 */
export function atelierHistory(dir: string, logFile: string): { rows: number; answeredLines: number; otherLines: number } {
  const db = new Database(join(dir, "atelier.db"), { readonly: true });
  const rows = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM requests WHERE kind = 'chat' AND status = 'succeeded'").get()!.n;
  db.close();
  const chatLines = readFileSync(logFile, "utf8").split("\n").filter((l) => l.includes('"msg":"request"') && l.includes("/v1/chat/completions"));
  // wrk hangs up on the requests still in flight when a run ends: one that had run past the
  // client-signal watch (core/clientSignal) is then cancelled, logged but not a succeeded row.
  const answeredLines = chatLines.filter((l) => l.includes('"status":200,')).length;
  return { rows, answeredLines, otherLines: chatLines.length - answeredLines };
}
