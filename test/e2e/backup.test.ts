/**
 * `atelier backup` and `atelier restore` as an operator runs them: a backup taken while a server
 * runs and other processes keep writing (credit grants, image charges), restored into a fresh
 * data directory where a new server starts and every balance equals its ledger.
 */
import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { databasePath } from "../../src/store/database";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier, startServerProcess, type ServerProcess } from "../support/process";
import { tempDir } from "../support/tempDirs";

const scratch: string[] = [];
const servers: ServerProcess[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});
const dir = (prefix: string) => {
  const d = tempDir(prefix);
  scratch.push(d);
  return d;
};
const cli = (dataDir: string, ...args: string[]) => runAtelier(ATELIER_FROM_SOURCE, [...args, "--data", dataDir]);

/** Each user's balance next to the sum of their ledger, read straight from the file. */
function balancesAndLedgers(dataDir: string) {
  const db = new Database(databasePath(dataDir), { readonly: true });
  try {
    return db
      .query<{ email: string; credits: number; ledger: number }, []>(
        "SELECT email, credits, (SELECT COALESCE(SUM(amount), 0) FROM ledger l WHERE l.user_id = u.id) AS ledger FROM users u ORDER BY id",
      )
      .all();
  } finally {
    db.close();
  }
}

test("backup under write load, restore refused under a running server, restored into a fresh data directory", async () => {
  const source = dir("atelier-backup-src-");
  const backups = dir("atelier-backup-files-");
  expect((await cli(source, "user", "add", "alice@example.com", "--credits", "1000")).code).toBe(0);
  expect((await cli(source, "user", "add", "bob@example.com", "--credits", "3")).code).toBe(0);
  const key = lastLine((await cli(source, "key", "create", "alice@example.com")).stdout);

  const server = await startServerProcess(ATELIER_FROM_SOURCE, ["--port", "0", "--data", source]);
  servers.push(server);

  // The write load: CLI processes granting credits, and image requests charging them.
  let writing = true;
  let grants = 0;
  let images = 0;
  const granting = (async () => {
    while (writing) if ((await cli(source, "credits", "grant", "bob@example.com", "2")).code === 0) grants++;
  })();
  const generating = Array.from({ length: 3 }, async () => {
    while (writing) {
      const res = await fetch(`${server.url}/v1/images/generations`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "builtin-image", prompt: "a lighthouse", size: "256x128", response_format: "b64_json" }),
      });
      await res.arrayBuffer();
      if (res.ok) images++;
    }
  });
  while (grants < 2 || images < 3) await Bun.sleep(20);

  const file = join(backups, "atelier-backup.db");
  const first = await cli(source, "backup", file);
  expect(first.stderr).toBe("");
  expect(first.code).toBe(0);
  expect(first.stdout).toContain("not in the backup");
  expect(existsSync(file)).toBe(true);

  const again = await cli(source, "backup", file);
  expect(again.code).toBe(1);
  expect(again.stderr).toContain("--force");
  // A second backup, still under load, replaces the first with --force.
  const forced = await cli(source, "backup", file, "--force");
  expect(forced.code).toBe(0);

  // Restoring under the running server is refused, and its database is untouched.
  const refused = await cli(source, "restore", file);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(`in use by another atelier process (pid ${server.proc.pid})`);

  writing = false;
  await Promise.all([granting, ...generating]);
  expect(await server.stop()).toBe(0);
  expect(existsSync(join(source, "atelier.lock"))).toBe(false);

  // The backup itself: a consistent state, balances equal to ledgers.
  const target = dir("atelier-backup-dst-");
  const restored = await cli(target, "restore", file);
  expect(restored.stderr).toBe("");
  expect(restored.code).toBe(0);

  const fresh = await startServerProcess(ATELIER_FROM_SOURCE, ["--port", "0", "--data", target]);
  servers.push(fresh);
  const rows = balancesAndLedgers(target);
  expect(rows.map((r) => r.email)).toEqual(["alice@example.com", "bob@example.com"]);
  for (const r of rows) expect(r.credits).toBe(r.ledger);
  // Taken mid-load: some grants and charges are in it.
  expect(rows[1]!.credits).toBeGreaterThan(3);
  expect(rows[0]!.credits).toBeLessThan(1000);
  // And the key in it still works against the restored server.
  const models = await fetch(`${fresh.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  expect(models.status).toBe(200);

  // Restoring again over an existing database keeps the old one aside.
  const busy = await cli(target, "restore", file);
  expect(busy.code).toBe(1);
  expect(await fresh.stop()).toBe(0);
  const over = await cli(target, "restore", file);
  expect(over.code).toBe(0);
  expect(over.stdout).toContain("before-restore-");
}, 60_000);

test("restore refuses a file that is not a sound Atelier database", async () => {
  const target = dir("atelier-restore-bad-");
  const junk = join(target, "junk.db");
  await Bun.write(junk, "not a database at all ".repeat(100));
  const r = await cli(target, "restore", junk);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain("not a readable Atelier database");
  expect(existsSync(databasePath(target))).toBe(false);
  const missing = await cli(target, "restore", join(target, "nope.db"));
  expect(missing.code).toBe(1);
  const usage = await cli(target, "backup");
  expect(usage.code).toBe(2);
});

test("with [database] url (PostgreSQL) backup and restore refuse, name pg_dump, never show the URL's password, and touch nothing", async () => {
  const dataDir = dir("atelier-backup-pg-");
  expect((await cli(dataDir, "user", "add", "pg@example.com", "--credits", "1")).code).toBe(0);
  const target = join(dataDir, "copy.db");
  const env = { ATELIER_DATABASE_URL: "postgres://atelier:hunter2-secret@127.0.0.1:1/atelier" };
  for (const args of [["backup", target], ["restore", databasePath(dataDir)]]) {
    const r = await runAtelier(ATELIER_FROM_SOURCE, [...args, "--data", dataDir], { env });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`atelier ${args[0]} copies the embedded SQLite database`);
    expect(r.stderr).toContain("pg_dump");
    expect(r.stderr + r.stdout).not.toContain("hunter2-secret");
  }
  expect(existsSync(target)).toBe(false);
  expect(balancesAndLedgers(dataDir).map((r) => r.email)).toEqual(["pg@example.com"]);
});
