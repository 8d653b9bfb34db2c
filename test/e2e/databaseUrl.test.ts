/**
 * [database] url before the store runs on PostgreSQL: `serve` and the CLI commands that open the
 * store refuse it, naming the key and never the URL, instead of quietly keeping the data in SQLite.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../src/config";
import { createLogger } from "../../src/logger";
import { runCli } from "../../src/main";
import { startServer } from "../../src/server";
import { tempDir } from "../support/server";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const URL_WITH_PASSWORD = "postgres://atelier:hunter2-Secret@127.0.0.1:1/atelier";

describe("[database] url is refused until the store runs on PostgreSQL", () => {
  test("serve: startServer fails with a ConfigError before touching the data directory", async () => {
    const dataDir = join(tempDir(), "data");
    dirs.push(dataDir);
    const config = loadConfig({ env: { ATELIER_DATABASE_URL: URL_WITH_PASSWORD, ATELIER_DATA: dataDir } });
    const logs: string[] = [];
    const error = await startServer(config, createLogger((l) => logs.push(l))).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toStartWith("database.url: ");
    expect((error as Error).message).not.toContain("hunter2");
    expect(existsSync(dataDir)).toBe(false);
    expect(logs.join("\n")).not.toContain("hunter2");
  });

  test("the CLI: `user add` and `credits` exit 1 with one line naming the key, not the URL", async () => {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const before = process.env.ATELIER_DATABASE_URL;
    process.env.ATELIER_DATABASE_URL = URL_WITH_PASSWORD;
    try {
      for (const args of [["user", "add", "a@example.com"], ["credits", "grant", "a@example.com", "1"]]) {
        const out: string[] = [];
        const err: string[] = [];
        expect(await runCli([...args, "--data", dataDir], { out: (s) => out.push(s), err: (s) => err.push(s) })).toBe(1);
        expect(out).toEqual([]);
        expect(err.join("\n")).toContain("database.url: this build cannot keep its store in PostgreSQL yet");
        expect(err.join("\n")).not.toContain("hunter2");
      }
      expect(existsSync(join(dataDir, "atelier.db"))).toBe(false);
    } finally {
      if (before === undefined) delete process.env.ATELIER_DATABASE_URL;
      else process.env.ATELIER_DATABASE_URL = before;
    }
  });
});
