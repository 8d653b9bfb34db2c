/**
 * WAL checkpoints off the serving thread (store/walCheckpoints.ts): the serving connection's
 * autocheckpoint is off only while the worker runs; the worker's checkpoints put committed rows
 * into the database file itself (a copy of that file alone, without its WAL, holds them); a
 * worker that cannot start or fails gives autocheckpoint back at once, so the WAL never grows
 * without bound.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../../src/store";
import { databasePath, latestVersion, openDatabase } from "../../src/store/database";
import { CHECKPOINT_INTERVAL_MS, checkpointInBackground } from "../../src/store/walCheckpoints";
import { until } from "../support/until";

const dirs: string[] = [];
function dataDir(): string {
  const d = mkdtempSync(join(tmpdir(), "atelier-wal-test-"));
  dirs.push(d);
  return d;
}
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const autocheckpoint = (db: Database) => db.query<{ wal_autocheckpoint: number }, []>("PRAGMA wal_autocheckpoint").get()!.wal_autocheckpoint;

/** The rows the database file holds by itself: a copy of it without its -wal file. */
function rowsInFileAlone(dir: string): number {
  const copy = join(dir, "file-alone.db");
  copyFileSync(databasePath(dir), copy);
  const db = new Database(copy, { readonly: true });
  try {
    return db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM requests").get()!.n;
  } finally {
    db.close();
  }
}

describe("checkpoints in the background", () => {
  test("a serving store: the worker checkpoints committed chat rows into the file while the serving connection never does", async () => {
    const dir = dataDir();
    const db = openDatabase(dir);
    const store = createStore(db, latestVersion());
    const userId = db.query<{ id: number }, []>("INSERT INTO users (email, role, credits, created_at) VALUES ('wal@example.test', 'user', 0, 0) RETURNING id").get()!.id;
    const problems: string[] = [];
    expect(autocheckpoint(db)).toBe(1000);
    store.checkpointInBackground((m) => problems.push(m));
    await until(() => autocheckpoint(db) === 0, "the worker to start");
    // A checkpoint of everything so far, so what follows starts in an empty WAL.
    await Bun.sleep(CHECKPOINT_INTERVAL_MS * 2);
    // The schema reaches the file with the worker's first checkpoint (late on a loaded machine).
    let before = -1;
    await until(() => {
      try {
        before = rowsInFileAlone(dir);
        return true;
      } catch {
        return false;
      }
    }, "the worker's first checkpoint", 10_000, 25);
    for (let i = 0; i < 300; i++) {
      store.requests.recordChat({ id: `req_wal_${String(i).padStart(4, "0")}`, userId, keyId: null, model: "chat", status: "succeeded", generationMs: 1 }, 5_000 + i);
    }
    expect(await store.requests.flushChats()).toBe(true);
    // Committed but (autocheckpoint off) not yet in the file by itself, until the worker's next round.
    // Each look copies the database file: every 25 ms, not the default 5.
    await until(() => rowsInFileAlone(dir) === before + 300, "the worker's checkpoint", 10_000, 25);
    expect(problems).toEqual([]);
    await store.close();
  });

  test("stop: a last checkpoint, and the serving connection checkpoints by itself again", async () => {
    const dir = dataDir();
    const db = openDatabase(dir);
    const problems: string[] = [];
    const checkpoints = checkpointInBackground(db, (m) => problems.push(m));
    await until(() => autocheckpoint(db) === 0, "the worker to start");
    db.exec("INSERT INTO users (email, role, credits, created_at) VALUES ('stop@example.test', 'user', 0, 0)");
    await checkpoints.stop();
    expect(autocheckpoint(db)).toBe(1000);
    copyFileSync(databasePath(dir), join(dir, "alone.db"));
    const alone = new Database(join(dir, "alone.db"), { readonly: true });
    expect(alone.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM users WHERE email = 'stop@example.test'").get()!.n).toBe(1);
    alone.close();
    expect(problems).toEqual([]);
    db.close();
  });

  test("a worker that cannot start leaves autocheckpoint on and says why", () => {
    const db = openDatabase(dataDir());
    const problems: string[] = [];
    checkpointInBackground(db, (m) => problems.push(m), () => {
      throw new Error("no threads here");
    });
    expect(autocheckpoint(db)).toBe(1000);
    expect(problems).toEqual(["the checkpoint worker did not start: no threads here"]);
    db.close();
  });

  test("a worker that fails after it started gives autocheckpoint back at once", async () => {
    const db = openDatabase(dataDir());
    const problems: string[] = [];
    // Says it is ready, then that its checkpoint failed (as a disk error would).
    const script = `self.onmessage = () => { postMessage({ kind: "ready" }); setTimeout(() => postMessage({ kind: "failed", message: "disk I/O error" }), 200); };`;
    const url = URL.createObjectURL(new Blob([script], { type: "application/javascript" }));
    const checkpoints = checkpointInBackground(db, (m) => problems.push(m), () => new Worker(url) as Worker & { unref(): void });
    await until(() => autocheckpoint(db) === 0, "the worker to say it is ready");
    await until(() => problems.length > 0, "the failure");
    expect(autocheckpoint(db)).toBe(1000);
    expect(problems).toEqual(["background WAL checkpoint failed: disk I/O error"]);
    await checkpoints.stop();
    db.close();
  });
});
