/**
 * Another process holding SQLite's write lock (a CLI command, a backup) for longer than the
 * server will wait: the server keeps answering, never 500s, delivers finished images, charges
 * nothing it cannot record, and every refund lands once the lock is gone.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { join } from "node:path";
import { embeddedOnly } from "../support/backend";
import { startTestServer, type TestServer } from "../support/server";

/** Another process holding atelier.db's write lock is a SQLite matter. */
const sqliteOnly = embeddedOnly("SQLite file locking");
import { ControlledEngine } from "../support/images";
import { until } from "../support/until";

// Long enough that a server frozen for the whole wait (SQLite waiting inside busy_timeout) is told
// apart from one merely slow on a loaded machine.
const BUSY_WAIT_MS = 1500;

let server: TestServer;
let engine: ControlledEngine;

beforeAll(async () => {
  engine = new ControlledEngine();
  server = await startTestServer({
    toml: `[database]\nbusy_wait_ms = ${BUSY_WAIT_MS}\n`,
    config: (c) => void (c.server.log_requests = false),
    customize: (s) => s.engines.registerBuiltinImage(engine),
  });
});
afterAll(async () => {
  engine.releaseAll();
  await server.close();
});

/** A second OS process that takes the write lock, says so, and holds it until told to stop (or ms pass). */
async function holdWriteLock(ms: number): Promise<{ release(): Promise<void> }> {
  const script = `
    const { Database } = require("bun:sqlite");
    const db = new Database(${JSON.stringify(join(server.dataDir, "atelier.db"))});
    db.exec("BEGIN IMMEDIATE");
    db.exec("UPDATE users SET credits = credits WHERE 0");
    console.log("locked");
    const timer = setTimeout(() => { db.exec("COMMIT"); process.exit(0); }, ${ms});
    process.stdin.on("data", () => { clearTimeout(timer); db.exec("COMMIT"); process.exit(0); });
  `;
  const child = Bun.spawn([process.execPath, "-e", script], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const reader = child.stdout.getReader();
  const { value } = await reader.read();
  expect(new TextDecoder().decode(value)).toContain("locked");
  return {
    async release() {
      child.stdin.write("go\n");
      child.stdin.flush();
      await child.exited;
    },
  };
}

function generate(key: string) {
  return fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "a red fox", size: "64x64" }),
  });
}

/** The longest /healthz round trip while `during` runs. */
async function healthzWorstDuring(during: Promise<unknown>): Promise<number> {
  let done = false;
  void during.finally(() => (done = true));
  let worst = 0;
  while (!done) {
    const started = performance.now();
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    worst = Math.max(worst, performance.now() - started);
    await Bun.sleep(25);
  }
  return worst;
}

sqliteOnly.test("an image that finishes while the lock is held is delivered, recorded once the lock is gone, and charged once", async () => {
  const { key, userId } = await server.userWithKey({ credits: 3 });
  engine.hold("succeed");
  const answer = generate(key);
  await until(() => engine.waiting === 1, "the request at the engine");
  const lock = await holdWriteLock(10_000);
  engine.releaseAll();
  const res = await answer;
  expect(res.status).toBe(200);
  expect((await res.json()).data[0].b64_json.length).toBeGreaterThan(0);
  const [row] = await server.services.store.requests.list({ userId, limit: 10 });
  expect(row!.status).toBe("pending");
  await lock.release();
  await until(async () => (await server.services.store.requests.list({ userId, limit: 10 }))[0]!.status === "succeeded", "the request recorded as succeeded");
  expect(await server.balance(userId)).toBe(2);
  expect(await server.services.store.credits.ledgerSum(userId)).toBe(2);
});

sqliteOnly.test("a request that cannot be charged within busy_wait_ms is 503 database_busy, not charged; the server stays responsive", async () => {
  const { key, userId } = await server.userWithKey({ credits: 3 });
  const lock = await holdWriteLock(10_000);
  const answer = generate(key);
  const worst = await healthzWorstDuring(answer);
  const res = await answer;
  expect(res.status).toBe(503);
  expect(res.headers.get("retry-after")).toBe("1");
  expect((await res.json()).error).toMatchObject({ code: "database_busy", type: "server_error" });
  // SQLite's own busy_timeout would have frozen the event loop for the whole wait.
  expect(worst).toBeLessThan(BUSY_WAIT_MS / 2);
  await lock.release();
  expect(await server.balance(userId)).toBe(3);
  expect(await server.services.store.requests.list({ userId, limit: 10 })).toHaveLength(0);
});

sqliteOnly.test("a failure while the lock is held is answered at once and refunded exactly once when the lock is gone", async () => {
  const { key, userId } = await server.userWithKey({ credits: 3 });
  engine.hold("fail");
  const answer = generate(key);
  await until(() => engine.waiting === 1, "the request at the engine");
  const lock = await holdWriteLock(10_000);
  engine.releaseAll();
  const res = await answer;
  expect(res.status).toBe(502);
  expect(await server.balance(userId)).toBe(2);
  await lock.release();
  await until(async () => (await server.balance(userId)) === 3, "the balance at 3");
  const [row] = await server.services.store.requests.list({ userId, limit: 10 });
  expect(row).toMatchObject({ status: "failed", credits_charged: 1, credits_refunded: 1 });
  expect(await server.services.store.credits.ledgerSum(userId)).toBe(3);
});

sqliteOnly.test("chat and key lookups go on while the lock is held; the history row lands afterwards", async () => {
  const { key, userId } = await server.userWithKey({ credits: 0 });
  const lock = await holdWriteLock(10_000);
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] }),
  });
  expect(res.status).toBe(200);
  expect(await server.services.store.requests.list({ userId, limit: 10 })).toHaveLength(0);
  await lock.release();
  await until(async () => (await server.services.store.requests.list({ userId, limit: 10 })).length === 1, "the request in the history");
});
