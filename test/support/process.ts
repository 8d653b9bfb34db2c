/**
 * Runs `atelier` as a real process: the source through `bun src/main.ts`, or a compiled binary.
 * A server's stdout is followed line by line so tests can wait for "listening" and read its URL.
 */
import { join } from "node:path";
import type { Subprocess } from "bun";

export const REPO = join(import.meta.dir, "../..");
/** `atelier` from source, with the same bun that runs the tests. */
export const ATELIER_FROM_SOURCE = [process.execPath, join(REPO, "src/main.ts")];

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs one CLI command to completion. */
export async function runAtelier(command: string[], args: string[], opts: { cwd?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  const proc = Bun.spawn([...command, ...args], {
    cwd: opts.cwd ?? REPO,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", ...opts.env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}

export const lastLine = (text: string) => text.trimEnd().split("\n").at(-1) ?? "";

export interface ServerProcess {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  url: string;
  /** Every stdout line so far (JSON log lines). */
  lines: string[];
  stderr(): Promise<string>;
  /** Resolves with the first log line (parsed) whose msg matches; rejects after timeoutMs. */
  waitForLog(msg: string, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** SIGTERM (unless already exited) and the exit code. */
  stop(): Promise<number>;
}

/** Starts `serve` and waits for its "listening" line; pass `--port 0` to get a free port. */
export async function startServerProcess(command: string[], args: string[], opts: { cwd?: string; env?: Record<string, string> } = {}): Promise<ServerProcess> {
  const proc = Bun.spawn([...command, "serve", ...args], {
    cwd: opts.cwd ?? REPO,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", ...opts.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines: string[] = [];
  const waiters: { msg: string; resolve: (l: Record<string, unknown>) => void }[] = [];
  const check = (line: string) => {
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    for (const w of [...waiters]) {
      if (parsed.msg === w.msg) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(parsed);
      }
    }
  };
  let ended = false;
  (async () => {
    const decoder = new TextDecoder();
    let pending = "";
    const reader = proc.stdout.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        lines.push(line);
        check(line);
      }
    }
    ended = true;
  })();
  const stderrText = new Response(proc.stderr).text();

  const waitForLog = (msg: string, timeoutMs = 15_000) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      for (const line of lines) {
        try {
          const parsed = JSON.parse(line) as Record<string, unknown>;
          if (parsed.msg === msg) return resolve(parsed);
        } catch {}
      }
      const timer = setTimeout(async () => {
        reject(new Error(`no "${msg}" log line within ${timeoutMs} ms (exited: ${ended}); stdout:\n${lines.join("\n")}\nstderr:\n${proc.exitCode !== null ? await stderrText : "(running)"}`));
      }, timeoutMs);
      waiters.push({ msg, resolve: (l) => (clearTimeout(timer), resolve(l)) });
    });

  let started = false;
  const exitedEarly = proc.exited.then(async (code) => {
    if (!started) throw new Error(`server exited with ${code} before listening: ${await stderrText}`);
    return {} as Record<string, unknown>;
  });
  const listening = await Promise.race([waitForLog("listening"), exitedEarly]);
  started = true;
  return {
    proc,
    url: String(listening.url),
    lines,
    stderr: () => stderrText,
    waitForLog,
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      return proc.exited;
    },
  };
}
