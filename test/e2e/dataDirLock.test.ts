/**
 * The data directory's lock with real processes: a second `atelier serve` on a live server's data
 * directory (an overlapping restart, an operator "just testing") exits before it touches the
 * database, so the live server's paid request is neither refunded nor failed; `restore` refuses
 * while the server runs, also after such a refused second server has gone; and a server killed
 * with SIGKILL leaves nothing that keeps the next one from starting.
 */
import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lockDataDir, lockDatabasePath, lockPidPath } from "../../src/cli/serverLock";
import { databasePath } from "../../src/store/database";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier, startServerProcess, type ServerProcess } from "../support/process";
import { tempDir } from "../support/tempDirs";
import { until } from "../support/until";

const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/** An OpenAI-compatible upstream whose image answers wait until released (the paid, slow generation). */
let waiting: (() => void)[] = [];
let held = true;
const upstream = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    if (!new URL(request.url).pathname.endsWith("/images/generations")) return Response.json({ object: "list", data: [] });
    if (held) await new Promise<void>((resolve) => waiting.push(resolve));
    return Response.json({ created: Math.floor(Date.now() / 1000), data: [{ b64_json: PNG_1X1 }] });
  },
});
const release = () => {
  held = false;
  for (const w of waiting.splice(0)) w();
};

const servers: ServerProcess[] = [];
afterAll(async () => {
  for (const s of servers) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill("SIGKILL");
  await Promise.all(servers.map((s) => s.proc.exited));
  release();
  upstream.stop(true);
});

/** A data directory with a config naming the upstream, one user with 5 credits, and their key. */
async function deployment(prefix: string): Promise<{ dir: string; args: string[]; key: string }> {
  const dir = tempDir(prefix);
  const file = join(dir, "atelier.toml");
  writeFileSync(
    file,
    `[server]\nlog_requests = false\n\n[[upstreams]]\nid = "up"\nkind = "openai"\nbase_url = "${upstream.url.origin}/v1"\nmax_attempts = 1\n` +
      `[[upstreams.accounts]]\nid = "a"\napi_key = "sk-test"\n\n[[models]]\nid = "slow-image"\nkind = "image"\nupstream = "up"\n`,
  );
  const args = ["--config", file, "--data", dir];
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "lock@example.com", "--credits", "5", ...args])).code).toBe(0);
  const key = lastLine((await runAtelier(ATELIER_FROM_SOURCE, ["key", "create", "lock@example.com", ...args])).stdout);
  return { dir, args, key };
}

const generate = (url: string, key: string) =>
  fetch(`${url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "slow-image", prompt: "a lighthouse", size: "64x64", response_format: "b64_json" }),
  });

/**
 * `atelier serve` expected to refuse: its exit code and output. One that starts instead (the bug)
 * is killed after `deadlineMs` rather than left to hang the test, and reported as code -1.
 */
async function serveRefused(args: string[], deadlineMs = 20_000): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([...ATELIER_FROM_SOURCE, "serve", ...args], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp" }, stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), deadlineMs);
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  return { code: proc.signalCode ? -1 : code, stdout, stderr };
}

/** The requests and ledger rows of the store, read straight from the file. */
function accounts(dir: string) {
  const db = new Database(databasePath(dir), { readonly: true });
  try {
    return {
      requests: db.query<{ status: string; credits_refunded: number }, []>("SELECT status, credits_refunded FROM requests WHERE kind = 'image' ORDER BY id").all(),
      ledger: db.query<{ kind: string; amount: number }, []>("SELECT kind, amount FROM ledger ORDER BY id").all(),
      credits: db.query<{ credits: number }, []>("SELECT credits FROM users").get()!.credits,
    };
  } finally {
    db.close();
  }
}

test("a second serve on a live server's data directory exits 1 untouched; the live request succeeds, charged once; restore refuses until the server stops", async () => {
  held = true;
  const { dir, args, key } = await deployment("atelier-lock-two-");
  const backupFile = join(dir, "before.db");
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["backup", backupFile, ...args])).code).toBe(0);

  const first = await startServerProcess(ATELIER_FROM_SOURCE, [...args, "--port", "0", "--host", "127.0.0.1"]);
  servers.push(first);
  const answer = generate(first.url, key);
  await until(() => waiting.length === 1, "the paid generation to reach the upstream");

  // The same configuration, the same port (Bun would let both listen on it).
  const second = await serveRefused([...args, "--port", new URL(first.url).port, "--host", "127.0.0.1"]);
  expect(second.code).toBe(1);
  expect(second.stderr).toContain(`the data directory ${dir} is in use by another atelier process (pid ${first.proc.pid})`);
  expect(second.stdout).not.toContain('"listening"');
  expect(second.stdout).not.toContain("refunded");
  // The refused server left the lock as it was: restore still refuses, naming the live server.
  const refused = await runAtelier(ATELIER_FROM_SOURCE, ["restore", backupFile, ...args]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(`in use by another atelier process (pid ${first.proc.pid})`);
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["doctor", ...args])).stdout).toContain(`(in use by atelier pid ${first.proc.pid})`);

  release();
  const res = await answer;
  expect(res.status).toBe(200);
  expect(((await res.json()) as { data: { b64_json: string }[] }).data[0]!.b64_json).toBe(PNG_1X1);
  expect(accounts(dir)).toEqual({ requests: [{ status: "succeeded", credits_refunded: 0 }], ledger: [{ kind: "grant", amount: 5 }, { kind: "charge", amount: -1 }], credits: 4 });

  expect(await first.stop()).toBe(0);
  expect(existsSync(lockPidPath(dir))).toBe(false);
  const restored = await runAtelier(ATELIER_FROM_SOURCE, ["restore", backupFile, ...args]);
  expect(restored.stderr).toBe("");
  expect(restored.code).toBe(0);
  expect(accounts(dir).credits).toBe(5);
});

test("the lock comes before recovery, and a server killed with SIGKILL leaves none: the next start takes it and refunds what was cut off, once", async () => {
  held = true;
  const { dir, args, key } = await deployment("atelier-lock-kill-");
  const killed = await startServerProcess(ATELIER_FROM_SOURCE, [...args, "--port", "0", "--host", "127.0.0.1"]);
  servers.push(killed);
  const cutOff = generate(killed.url, key).catch(() => "connection lost");
  await until(() => waiting.length === 1, "the paid generation to reach the upstream");
  killed.proc.kill("SIGKILL");
  await killed.proc.exited;
  expect(await cutOff).toBe("connection lost");
  // What a kill leaves: the lock database, and a pid file naming a process that is gone.
  expect(existsSync(lockDatabasePath(dir))).toBe(true);
  expect(readFileSync(lockPidPath(dir), "utf8").trim()).toBe(String(killed.proc.pid));

  // Another holder (as a restore would be): serve refuses before it migrates or recovers anything.
  const attempt = lockDataDir(dir);
  if (!("lock" in attempt)) throw new Error("the killed server's lock was not free");
  try {
    const refused = await serveRefused([...args, "--port", "0", "--host", "127.0.0.1"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`in use by another atelier process (pid ${process.pid})`);
    expect(accounts(dir).requests).toEqual([{ status: "pending", credits_refunded: 0 }]);
  } finally {
    attempt.lock.release();
  }

  const next = await startServerProcess(ATELIER_FROM_SOURCE, [...args, "--port", "0", "--host", "127.0.0.1"]);
  servers.push(next);
  const recovered = await next.waitForLog("refunded requests interrupted by a previous stop");
  expect(recovered.count).toBe(1);
  expect(accounts(dir)).toEqual({ requests: [{ status: "interrupted", credits_refunded: 1 }], ledger: [{ kind: "grant", amount: 5 }, { kind: "charge", amount: -1 }, { kind: "refund", amount: 1 }], credits: 5 });
  // Held by the new server now, under its own pid (not the dead one's).
  const third = await serveRefused([...args, "--port", "0", "--host", "127.0.0.1"]);
  expect(third.code).toBe(1);
  expect(third.stderr).toContain(`(pid ${next.proc.pid})`);
  expect(await next.stop()).toBe(0);
  expect(existsSync(lockPidPath(dir))).toBe(false);
});
