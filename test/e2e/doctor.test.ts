/**
 * `atelier doctor` as an operator runs it: a good setup passes, and each kind of problem — a
 * broken config, a dead upstream, a refused key, a balance that left its ledger, a Redis that
 * does not answer — fails it with
 * a row that names the problem and never shows a secret.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { appendFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { databasePath } from "../../src/store/database";
import { startFakeOpenAI, type FakeOpenAI } from "../support/fakeUpstreams";
import { ATELIER_FROM_SOURCE, runAtelier } from "../support/process";
import { startPostgres } from "../support/postgresServer";
import { startRedis } from "../support/redisServer";
import { tempDir } from "../support/tempDirs";

let openai: FakeOpenAI;
let dataDir: string;
let configDir: string;
let deadUrl: string;

beforeAll(async () => {
  openai = startFakeOpenAI();
  openai.alwaysFault("sk-revoked-secret", { kind: "status", status: 401, message: "Incorrect API key" });
  dataDir = tempDir("atelier-doctor-");
  configDir = tempDir("atelier-doctor-config-");
  // A port that was just free: nothing listens there any more.
  const closed = Bun.serve({ port: 0, fetch: () => new Response("") });
  deadUrl = `http://127.0.0.1:${closed.port}/v1`;
  closed.stop(true);
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "ann@example.com", "--credits", "5", "--data", dataDir])).code).toBe(0);
});
afterAll(async () => {
  await openai.stop();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(configDir, { recursive: true, force: true });
});

function configWith(name: string, accounts: { id: string; key: string; base?: string }[]): string {
  const file = join(configDir, `${name}.toml`);
  const upstreams = accounts
    .map(
      (a) => `
[[upstreams]]
id = "oa-${a.id}"
kind = "openai"
base_url = "${a.base ?? `${openai.url}/v1`}"
accounts = [ { id = "${a.id}", api_key = "${a.key}" } ]
`,
    )
    .join("");
  writeFileSync(file, upstreams);
  return file;
}

const doctor = (config: string, data = dataDir, env: Record<string, string> = {}) =>
  runAtelier(ATELIER_FROM_SOURCE, ["doctor", "--config", config, "--data", data, "--timeout-ms", "2000"], { env });
const row = (stdout: string, check: string) => stdout.split("\n").find((l) => l.startsWith(`${check} `)) ?? "";

test("a good setup: every check ok, exit 0, the key checked but never shown", async () => {
  const r = await doctor(configWith("good", [{ id: "main", key: "sk-good-secret" }]));
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(r.stdout.split("\n")[0]).toMatch(/^CHECK\s+STATUS\s+DETAIL$/);
  for (const check of ["config", "database integrity", "database migrations", "ledger", "data directory", "upstream oa-main/main"]) {
    expect(row(r.stdout, check)).toMatch(new RegExp(`^${check}\\s+ok\\s+`));
  }
  expect(row(r.stdout, "upstream oa-main/main")).toContain("credentials accepted");
  expect(openai.received.some((q) => q.path === "/v1/models" && q.account === "sk-good-secret")).toBe(true);
  expect(r.stdout).not.toContain("sk-good-secret");
});

test("a broken config fails the config check", async () => {
  const file = join(configDir, "broken.toml");
  writeFileSync(file, `[server]\nport = "eighty"\n`);
  const r = await doctor(file);
  expect(r.code).toBe(1);
  expect(row(r.stdout, "config")).toMatch(/^config\s+fail\s+.*port/);
  expect(r.stderr).toContain("1 check failed");
});

test("a dead upstream and a refused key fail their rows; the healthy one stays ok", async () => {
  const r = await doctor(
    configWith("upstreams", [
      { id: "main", key: "sk-good-secret" },
      { id: "dead", key: "sk-dead-secret", base: deadUrl },
      { id: "revoked", key: "sk-revoked-secret" },
    ]),
  );
  expect(r.code).toBe(1);
  expect(row(r.stdout, "upstream oa-main/main")).toMatch(/\sok\s/);
  expect(row(r.stdout, "upstream oa-dead/dead")).toMatch(/\sfail\s+unreachable/);
  expect(row(r.stdout, "upstream oa-revoked/revoked")).toMatch(/\sfail\s+credentials refused .*401/);
  expect(r.stderr).toContain("2 checks failed");
  for (const secret of ["sk-good-secret", "sk-dead-secret", "sk-revoked-secret"]) expect(r.stdout + r.stderr).not.toContain(secret);
});

test("a balance that differs from its ledger fails the ledger check; a missing database fails too", async () => {
  const db = new Database(databasePath(dataDir));
  db.run("UPDATE users SET credits = credits + 7 WHERE email = 'ann@example.com'");
  db.close();
  const good = configWith("good2", [{ id: "main", key: "sk-good-secret" }]);
  const r = await doctor(good);
  expect(r.code).toBe(1);
  expect(row(r.stdout, "ledger")).toMatch(/^ledger\s+fail\s+balance differs from the ledger sum for user id 1$/);

  const empty = tempDir("atelier-doctor-empty-");
  const none = await doctor(good, empty);
  rmSync(empty, { recursive: true, force: true });
  expect(none.code).toBe(1);
  expect(row(none.stdout, "database")).toMatch(/^database\s+fail\s+no database/);
});

test("with [database] url the PostgreSQL store is checked (schema version, ledger) without migrating it; an unreachable one fails without its password", async () => {
  const pg = await startPostgres({ migrated: true });
  try {
    const good = configWith("good-pg", [{ id: "main", key: "sk-good-secret" }]);
    const r = await doctor(good, dataDir, { ATELIER_DATABASE_URL: pg.url });
    expect(r.code).toBe(0);
    const where = new URL(pg.url);
    expect(row(r.stdout, "database")).toMatch(new RegExp(`^database\\s+ok\\s+PostgreSQL ${where.hostname}:${where.port}/${pg.database}$`));
    expect(row(r.stdout, "database migrations")).toMatch(/^database migrations\s+ok\s+schema version \d+ \(latest\)$/);
    expect(row(r.stdout, "ledger")).toMatch(/^ledger\s+ok\s+every balance equals its ledger \(0 users\)$/);
    // SQLite's integrity check is not PostgreSQL's: no such row.
    expect(row(r.stdout, "database integrity")).toBe("");

    // A balance without its ledger row.
    const client = pg.client();
    await client.run("INSERT INTO users (email, password_hash, role, credits, created_at) VALUES ('drift@example.com', NULL, 'user', 4, 0)");
    const drift = (await client.get<{ id: number }>("SELECT id FROM users WHERE email = 'drift@example.com'"))!.id;
    const bad = await doctor(good, dataDir, { ATELIER_DATABASE_URL: pg.url });
    expect(bad.code).toBe(1);
    expect(row(bad.stdout, "ledger")).toMatch(new RegExp(`^ledger\\s+fail\\s+balance differs from the ledger sum for user id ${drift}$`));
    // Doctor changes nothing: the drift is still there.
    expect((await client.get<{ credits: number }>("SELECT credits FROM users WHERE id = ?", [drift]))!.credits).toBe(4);

    const dead = await doctor(good, dataDir, { ATELIER_DATABASE_URL: "postgres://atelier:hunter2-secret@127.0.0.1:1/atelier" });
    expect(dead.code).toBe(1);
    expect(row(dead.stdout, "database")).toMatch(/^database\s+fail\s+PostgreSQL 127\.0\.0\.1:1\/atelier: /);
    expect(dead.stdout + dead.stderr).not.toContain("hunter2-secret");
  } finally {
    await pg.stop();
  }
}, 60_000);

test("with [redis] url Redis must answer PING: ok while it runs; a wrong password, a frozen server and a stopped one fail (exit 1) without showing the password", async () => {
  const password = "Redis-pw-7Qx";
  const redis = await startRedis({ password });
  // A data directory of its own: the ledger test above left one balance off its ledger in the shared one.
  const data = tempDir("atelier-doctor-redis-");
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "rae@example.com", "--credits", "5", "--data", data])).code).toBe(0);
  const withRedis = (name: string, url: string) => {
    const file = configWith(name, [{ id: "main", key: "sk-good-secret" }]);
    appendFileSync(file, `\n[redis]\nurl = "${url}"\n`);
    return file;
  };
  const good = withRedis("redis-good", redis.url);
  const where = `redis://127\\.0\\.0\\.1:${redis.port}`;
  try {
    const ok = await doctor(good, data);
    expect(ok.stderr).toBe("");
    expect(ok.code).toBe(0);
    expect(row(ok.stdout, "redis")).toMatch(new RegExp(`^redis\\s+ok\\s+${where} answered PING in \\d+ ms$`));
    expect(ok.stdout).not.toContain(password);

    // The port answers but Redis refuses the password: the server could not use it either.
    const wrong = await doctor(withRedis("redis-wrong", `redis://:wrong-${password}@127.0.0.1:${redis.port}`), data);
    expect(wrong.code).toBe(1);
    expect(row(wrong.stdout, "redis")).toMatch(new RegExp(`^redis\\s+fail\\s+${where}: the port accepts connections, but Redis closed this one: .*password`));
    expect(wrong.stdout + wrong.stderr).not.toContain(password);

    // Frozen: the connection opens and nothing answers; doctor's own time limit (2000 ms) ends the wait.
    redis.pause();
    const started = performance.now();
    const frozen = await doctor(good, data).finally(() => redis.resume());
    expect(performance.now() - started).toBeLessThan(15_000);
    expect(frozen.code).toBe(1);
    expect(row(frozen.stdout, "redis")).toMatch(new RegExp(`^redis\\s+fail\\s+${where}: no answer within 2000 ms; until it answers, the server is not ready`));
  } finally {
    await redis.stop();
  }

  const down = await doctor(good, data);
  expect(down.code).toBe(1);
  expect(row(down.stdout, "redis")).toMatch(new RegExp(`^redis\\s+fail\\s+${where}: unreachable: ECONNREFUSED; until it answers, the server is not ready and refuses image and chat requests \\(503\\)$`));
  expect(down.stderr).toContain("1 check failed");
  // The other checks are unaffected.
  expect(row(down.stdout, "upstream oa-main/main")).toMatch(/\sok\s/);
  expect(down.stdout + down.stderr).not.toContain(password);
}, 60_000);
