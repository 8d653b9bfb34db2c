/**
 * [database] url: `serve` and the CLI keep the store in PostgreSQL (nothing in data_dir's
 * SQLite), the money path works through the openai client, a restart keeps everything, and an
 * unreachable database is refused at start without its password in any message or log line.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { loadConfig } from "../../src/config";
import { createLogger } from "../../src/logger";
import { runCli } from "../../src/main";
import { startServer } from "../../src/server";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";
import { startPostgres, type TestPostgres } from "../support/postgresServer";

const dirs: string[] = [];
let pg: TestPostgres;
beforeAll(async () => {
  pg = await startPostgres();
});
afterAll(async () => {
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  await pg.stop();
});

const URL_WITH_PASSWORD = "postgres://atelier:hunter2-Secret@127.0.0.1:1/atelier";

async function serveOnPostgres(instanceId?: string): Promise<TestServer> {
  return startTestServer({
    config: (c) => {
      c.database.url = pg.url;
      if (instanceId) c.instance.id = instanceId;
    },
  });
}

describe("[database] url: the store in PostgreSQL", () => {
  test("an image is charged and chat recorded, by this instance, in PostgreSQL, none in SQLite; a restart keeps it", async () => {
    let server = await serveOnPostgres("pg-a");
    try {
      expect(existsSync(join(server.dataDir, "atelier.db"))).toBe(false);
      const { userId, key } = await server.userWithKey({ credits: 3 });
      const client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
      const image = await client.images.generate({ model: "builtin-image", prompt: "a lighthouse", size: "256x256" });
      expect(image.data?.[0]?.b64_json?.length).toBeGreaterThan(100);
      const chat = await client.chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "hello" }] });
      expect(chat.id).toStartWith("req_");
      expect(await server.balance(userId)).toBe(2);

      const db = pg.client();
      const rows = await db.all<{ kind: string; status: string; owner: string | null }>("SELECT kind, status, owner FROM requests WHERE user_id = ? ORDER BY kind", [userId]);
      await server.services.store.requests.flushChats();
      const after = await db.all<{ kind: string; status: string; owner: string | null }>("SELECT kind, status, owner FROM requests WHERE user_id = ? ORDER BY kind", [userId]);
      expect(after.map((r) => [r.kind, r.status])).toEqual([
        ["chat", "succeeded"],
        ["image", "succeeded"],
      ]);
      expect(rows.find((r) => r.kind === "image")?.owner).toBe("pg-a");
      const ledger = await db.get<{ s: number }>("SELECT CAST(SUM(amount) AS BIGINT) AS s FROM ledger WHERE user_id = ?", [userId]);
      expect(ledger?.s).toBe(2);
      const ready = await fetch(`${server.url}/readyz`);
      expect(ready.status).toBe(200);

      await server.close();
      server = await serveOnPostgres("pg-a");
      expect(await server.balance(userId)).toBe(2);
      const again = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
      expect((await again.models.list()).data.length).toBeGreaterThan(0);
    } finally {
      await server.close();
    }
  });

  test("the CLI works on the same database: user add, credits grant, key create", async () => {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const before = process.env.ATELIER_DATABASE_URL;
    process.env.ATELIER_DATABASE_URL = pg.url;
    try {
      const out: string[] = [];
      const io = { out: (s: string) => out.push(s), err: (s: string) => out.push(s) };
      expect(await runCli(["user", "add", "cli@example.com", "--credits", "4", "--data", dataDir], io)).toBe(0);
      expect(await runCli(["credits", "grant", "cli@example.com", "3", "--data", dataDir], io)).toBe(0);
      expect(existsSync(join(dataDir, "atelier.db"))).toBe(false);
      const row = await pg.client().get<{ credits: number }>("SELECT credits FROM users WHERE lower(email) = lower(?)", ["CLI@example.com"]);
      expect(row?.credits).toBe(7);
    } finally {
      if (before === undefined) delete process.env.ATELIER_DATABASE_URL;
      else process.env.ATELIER_DATABASE_URL = before;
    }
  });

  test("an unreachable database: serve refuses to start, naming host and database but never the password", async () => {
    const dataDir = join(tempDir(), "data");
    dirs.push(dataDir);
    const config = loadConfig({ env: { ATELIER_DATABASE_URL: URL_WITH_PASSWORD, ATELIER_DATA: dataDir } });
    const logs: string[] = [];
    const error = await startServer(config, createLogger((l) => logs.push(l))).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toContain("127.0.0.1:1/atelier");
    expect((error as Error).message).not.toContain("hunter2");
    expect(logs.join("\n")).not.toContain("hunter2");
    expect(existsSync(join(dataDir, "atelier.db"))).toBe(false);
  });
});
