/**
 * What Atelier writes on disk is closed to other local users: the data directory 0700, the
 * database (which holds the image-link signing key and every prompt) and its -wal/-shm 0600,
 * the lock file, the kept images and their folders, backups and restored databases too. The
 * processes run under umask 022, the usual one, under which these came out 0755/0644. The test
 * machine runs as root, who reads everything: the mode bits are asserted, not another user's
 * access.
 */
import { afterAll, expect, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { databasePath } from "../../src/store/database";
import { lastLine, REPO, runAtelier, startServerProcess, type ServerProcess } from "../support/process";
import { tempDir } from "../support/tempDirs";

/** `atelier` from source under umask 022, whatever the test runner's own umask is. */
const ATELIER_UMASK_022 = ["/bin/sh", "-c", 'umask 022 && exec "$@"', "sh", process.execPath, join(REPO, "src/main.ts")];

const servers: ServerProcess[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
});

const cli = (dataDir: string, ...args: string[]) => runAtelier(ATELIER_UMASK_022, [...args, "--data", dataDir]);
const serve = async (dataDir: string) => {
  const s = await startServerProcess(ATELIER_UMASK_022, ["--port", "0", "--host", "127.0.0.1", "--data", dataDir]);
  servers.push(s);
  return s;
};
const modeOf = (path: string) => `0${(statSync(path).mode & 0o777).toString(8)}`;

/** Every folder and file under dir, with its mode. */
function modesUnder(dir: string): { path: string; dir: boolean; mode: string }[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true }).map((e) => {
    const path = join(e.parentPath, e.name);
    return { path, dir: e.isDirectory(), mode: modeOf(path) };
  });
}

async function generateKeptImage(server: ServerProcess, key: string): Promise<void> {
  const res = await fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "builtin-image", prompt: "a secret lighthouse", size: "256x128", response_format: "url" }),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

test("a new data directory, its database, lock, images and backups are 0700/0600 under umask 022", async () => {
  const root = tempDir("atelier-private-");
  // Neither folder exists yet: the first command makes both.
  const dataDir = join(root, "srv", "data");
  expect((await cli(dataDir, "user", "add", "ann@example.com", "--credits", "10")).code).toBe(0);
  expect(modeOf(join(root, "srv"))).toBe("0700");
  expect(modeOf(dataDir)).toBe("0700");
  expect(modeOf(databasePath(dataDir))).toBe("0600");
  const key = lastLine((await cli(dataDir, "key", "create", "ann@example.com")).stdout);

  const server = await serve(dataDir);
  await generateKeptImage(server, key);
  // While it serves: the WAL files SQLite made, the lock, the image and every folder above it.
  for (const name of ["atelier.db", "atelier.db-wal", "atelier.db-shm", "atelier.lock"]) expect([name, modeOf(join(dataDir, name))]).toEqual([name, "0600"]);
  const images = modesUnder(join(dataDir, "images"));
  expect(images.filter((e) => !e.dir).length).toBe(1);
  expect(modeOf(join(dataDir, "images"))).toBe("0700");
  for (const e of images) expect([e.path, e.mode]).toEqual([e.path, e.dir ? "0700" : "0600"]);
  expect(server.lines.join("\n")).not.toContain("open to other local users");

  // A backup into folders that do not exist yet, while the server runs.
  const file = join(root, "backups", "daily", "atelier.db");
  const backup = await cli(dataDir, "backup", file);
  expect(backup.stderr).toBe("");
  expect(backup.code).toBe(0);
  expect(modeOf(file)).toBe("0600");
  expect(modeOf(join(root, "backups"))).toBe("0700");
  expect(modeOf(join(root, "backups", "daily"))).toBe("0700");
  expect(readdirSync(join(root, "backups", "daily"))).toEqual(["atelier.db"]);
  // --force over a file an older Atelier left 0644: the new copy is 0600.
  chmodSync(file, 0o644);
  expect((await cli(dataDir, "backup", file, "--force")).code).toBe(0);
  expect(modeOf(file)).toBe("0600");
  expect(await server.stop()).toBe(0);

  // Restoring a 0644 backup gives a 0600 database, in a new folder made 0700; restoring over it
  // keeps the database it replaces 0600 too.
  const old = join(root, "old-backup.db");
  copyFileSync(file, old);
  chmodSync(old, 0o644);
  const target = join(root, "restored");
  expect((await cli(target, "restore", old)).code).toBe(0);
  expect(modeOf(target)).toBe("0700");
  expect(modeOf(databasePath(target))).toBe("0600");
  chmodSync(databasePath(target), 0o644);
  const over = await cli(target, "restore", old);
  expect(over.code).toBe(0);
  const aside = readdirSync(target).find((n) => n.startsWith("atelier.db.before-restore-"));
  expect(aside).toBeDefined();
  expect(modeOf(join(target, aside!))).toBe("0600");
  expect(modeOf(databasePath(target))).toBe("0600");
}, 60_000);

test("an older deployment's 0644 database and WAL are made 0600 at the next start; its 0755 folder is reported, not changed", async () => {
  const dataDir = tempDir("atelier-private-old-");
  expect((await cli(dataDir, "user", "add", "bo@example.com", "--credits", "1")).code).toBe(0);
  // What an older Atelier left behind: a 0755 folder and a 0644 database, and WAL files of the same mode.
  chmodSync(dataDir, 0o755);
  const db = databasePath(dataDir);
  chmodSync(db, 0o644);
  for (const suffix of ["-wal", "-shm"]) {
    await Bun.write(db + suffix, "");
    chmodSync(db + suffix, 0o644);
  }

  const doctor = await cli(dataDir, "doctor");
  expect(doctor.code).toBe(0);
  const row = doctor.stdout.split("\n").find((l) => l.startsWith("data directory ")) ?? "";
  expect(row).toMatch(/^data directory\s+warn\s+.*; mode 0755: other local users can list it \(chmod 700 it\)$/);
  // doctor changes nothing.
  expect(modeOf(db)).toBe("0644");

  const server = await serve(dataDir);
  for (const suffix of ["", "-wal", "-shm"]) expect([suffix, modeOf(db + suffix)]).toEqual([suffix, "0600"]);
  expect(modeOf(dataDir)).toBe("0755");
  const warning = await server.waitForLog("the data directory is open to other local users; chmod 700 it");
  expect(warning).toMatchObject({ level: "warn", data_dir: dataDir, mode: "0755" });
  expect(await server.stop()).toBe(0);

  // Closed by its operator: no warning from doctor any more.
  chmodSync(dataDir, 0o700);
  const fine = await cli(dataDir, "doctor");
  expect(fine.stdout.split("\n").find((l) => l.startsWith("data directory "))).toMatch(/^data directory\s+ok\s+/);
  expect(existsSync(db)).toBe(true);
}, 60_000);
