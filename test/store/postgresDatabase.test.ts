/**
 * openPostgres against a real PostgreSQL on loopback: migrates a fresh database once, even when
 * several instances start together; runs a lower number that joined the list later; refuses a
 * database newer than the binary; and reports an unreachable server without its password.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { DatabaseTooNewError, latestVersion } from "../../src/store/database";
import type { Migration } from "../../src/store/migrations";
import { postgresMigrations } from "../../src/store/postgresMigrations";
import { DatabaseUnavailableError, describePostgresUrl, openPostgres, postgresSchemaVersion } from "../../src/store/postgresDatabase";
import { PostgresClient } from "../../src/store/sql";
import { startPostgres, type TestPostgres } from "../support/postgresServer";

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function freshDatabase(): Promise<TestPostgres> {
  const pg = await startPostgres();
  cleanup.push(() => pg.stop());
  return pg;
}

function closeLater(client: PostgresClient): PostgresClient {
  cleanup.push(() => client.close());
  return client;
}

const recorded = (c: PostgresClient) => c.all<{ version: number; name: string }>("SELECT version, name FROM schema_migrations ORDER BY version");

describe("openPostgres", () => {
  test("migrates a fresh database to the latest version and records every migration once; opening again applies nothing", async () => {
    const pg = await freshDatabase();
    const client = closeLater(await openPostgres(pg.url));
    expect(await postgresSchemaVersion(client)).toBe(latestVersion(postgresMigrations));
    expect(await recorded(client)).toEqual(postgresMigrations.map((m) => ({ version: m.version, name: m.name })).sort((a, b) => a.version - b.version));
    // The store works: a user with credits, read back as numbers.
    await client.run("INSERT INTO users (email, credits, created_at) VALUES (?, ?, ?)", ["a@example.com", 3, Date.now()]);
    expect(await client.get("SELECT id, credits FROM users")).toEqual({ id: 1, credits: 3 });

    const again = closeLater(await openPostgres(pg.url));
    expect((await recorded(again)).length).toBe(postgresMigrations.length);
    expect(await again.get("SELECT COUNT(*) AS n FROM users")).toEqual({ n: 1 });
  });

  test("three instances starting together on an empty database migrate it once, and all of them open", async () => {
    const pg = await freshDatabase();
    const clients = await Promise.all([openPostgres(pg.url), openPostgres(pg.url), openPostgres(pg.url)]);
    clients.forEach(closeLater);
    for (const c of clients) expect(await postgresSchemaVersion(c)).toBe(latestVersion(postgresMigrations));
    expect(await clients[0]!.get("SELECT COUNT(*) AS n, COUNT(DISTINCT version) AS d FROM schema_migrations")).toEqual({
      n: postgresMigrations.length,
      d: postgresMigrations.length,
    });
  });

  test("a migration whose number is below the newest applied one still runs once it joins the list", async () => {
    const pg = await freshDatabase();
    const first: Migration[] = [
      { version: 1, name: "one", sql: "CREATE TABLE one (x BIGINT)" },
      { version: 3, name: "three", sql: "CREATE TABLE three (x BIGINT)" },
    ];
    closeLater(await openPostgres(pg.url, {}, first));
    const later = [...first, { version: 2, name: "two", sql: "CREATE TABLE two (x BIGINT); INSERT INTO two VALUES (2);" }];
    const client = closeLater(await openPostgres(pg.url, {}, later));
    expect((await recorded(client)).map((r) => r.version)).toEqual([1, 2, 3]);
    expect(await client.get("SELECT x FROM two")).toEqual({ x: 2 });
  });

  test("a failing migration leaves nothing behind: no table, no record", async () => {
    const pg = await freshDatabase();
    const broken: Migration[] = [
      { version: 1, name: "one", sql: "CREATE TABLE one (x BIGINT)" },
      { version: 2, name: "broken", sql: "CREATE TABLE two (x BIGINT); SELECT * FROM no_such_table;" },
    ];
    await expect(openPostgres(pg.url, {}, broken)).rejects.toThrow(/no_such_table/);
    const client = closeLater(PostgresClient.connect(pg.url));
    expect(await client.all("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")).toEqual([]);
  });

  test("refuses a database whose schema is newer than this binary, and changes nothing", async () => {
    const pg = await freshDatabase();
    const client = closeLater(await openPostgres(pg.url));
    const future = latestVersion(postgresMigrations) + 1;
    await client.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", [future, "from a newer atelier", 0]);
    const error = await openPostgres(pg.url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseTooNewError);
    expect((error as Error).message).toContain(`schema version ${future}`);
    expect(await postgresSchemaVersion(client)).toBe(future);
  });

  test("an unreachable server fails with the host, port and database, never the password", async () => {
    // A port nothing listens on: connection refused at once.
    const url = "postgres://atelier:Sup3r-Secret-pw@127.0.0.1:1/atelier";
    const error = await openPostgres(url, { connectionTimeoutS: 2 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    const message = (error as Error).message;
    expect(message).toContain("127.0.0.1:1/atelier");
    expect(message).not.toContain("Sup3r");
    expect(message).not.toContain("Secret");
    expect(message).toContain("ERR_POSTGRES_CONNECTION_REFUSED");
    expect(describePostgresUrl("postgresql://u:p%40ss@db.internal:6432/app?sslmode=require")).toBe("db.internal:6432/app");
  });
});
