/**
 * The test PostgreSQL itself: every startPostgres() is its own empty database on one loopback
 * server, and stop() drops it.
 */
import { describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { latestVersion } from "../../src/store/database";
import { postgresMigrations } from "../../src/store/postgresMigrations";
import { postgresSchemaVersion } from "../../src/store/postgresDatabase";
import { startPostgres } from "./postgresServer";

describe("startPostgres", () => {
  test("gives each caller a fresh, empty database on loopback, and stop() drops it", async () => {
    const [a, b] = await Promise.all([startPostgres(), startPostgres()]);
    expect(a.database).not.toBe(b.database);
    expect(new URL(a.url).hostname).toBe("127.0.0.1");
    const ca = a.client();
    const cb = b.client();
    await ca.run("CREATE TABLE only_in_a (x BIGINT)");
    expect(await ca.all("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")).toEqual([{ table_name: "only_in_a" }]);
    expect(await cb.all("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")).toEqual([]);
    expect(await ca.get("SELECT current_database() AS d")).toEqual({ d: a.database });

    await a.stop();
    await b.stop();
    const admin = new SQL({ url: new URL("/postgres", a.url).href, max: 1 });
    try {
      const left = (await admin.unsafe("SELECT datname FROM pg_database WHERE datname IN ($1, $2)", [a.database, b.database])) as unknown[];
      expect(left).toEqual([]);
    } finally {
      await admin.close();
    }
  });

  test("{ migrated: true } gives each caller its own database at the latest schema, writable independently", async () => {
    const [a, b] = await Promise.all([startPostgres({ migrated: true }), startPostgres({ migrated: true })]);
    try {
      const ca = a.client();
      const cb = b.client();
      expect(await postgresSchemaVersion(ca)).toBe(latestVersion(postgresMigrations));
      expect(await postgresSchemaVersion(cb)).toBe(latestVersion(postgresMigrations));
      await ca.run("INSERT INTO users (email, credits, created_at) VALUES ('a@example.com', 1, 0)");
      expect(await ca.get("SELECT COUNT(*) AS n FROM users")).toEqual({ n: 1 });
      expect(await cb.get("SELECT COUNT(*) AS n FROM users")).toEqual({ n: 0 });
    } finally {
      await a.stop();
      await b.stop();
    }
  });
});
