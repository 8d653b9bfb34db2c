/**
 * store/upstreams.ts (the pool's disabled flags and snapshots) gives the same answers on SQLite
 * and on PostgreSQL, and every disable or enable moves the shared store_revision in its own
 * transaction, which is how a pool in another process or instance notices it. A pool on each
 * engine then sees an enable made through a second connection.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { latestVersion, openDatabase } from "../../src/store/database";
import { Revisions } from "../../src/store/revisions";
import { SqliteClient, type SqlClient } from "../../src/store/sql";
import { UpstreamStateStore } from "../../src/store/upstreams";
import { AccountPool, AttemptFailure } from "../../src/engines/pool";
import type { AccountSnapshot } from "../../src/core/store";
import { startPostgres, type TestPostgres } from "../support/postgresServer";

let pg: TestPostgres;

// A first start in this process may create the test cluster (initdb): more than the default 5 s on a loaded machine.
beforeAll(async () => {
  pg = await startPostgres({ migrated: true });
}, 60_000);
afterAll(async () => {
  await pg?.stop();
});

function storeOn(sql: SqlClient): UpstreamStateStore {
  return new UpstreamStateStore(sql, new Revisions(sql));
}

function snapshot(accountId: string, inFlight: number): AccountSnapshot {
  return { upstreamId: "up", accountId, weight: 1, capacity: 2, inFlight, state: "healthy", coolingUntil: null, disabledReason: null, disabledAt: null, consecutiveFailures: 0, recentFailures: [] };
}

const engines: [string, () => SqlClient][] = [
  ["SQLite", () => (void latestVersion, new SqliteClient(openDatabase(":memory:")))],
  ["PostgreSQL", () => pg.client()],
];

for (const [name, open] of engines) {
  describe(`store/upstreams on ${name}`, () => {
    test("disable and enable move store_revision; enabling an account that was not disabled does not", async () => {
      const store = storeOn(open());
      const r0 = await store.externalRevision();
      await store.disableAccount("up", "a", "upstream answered 401", 5);
      const r1 = await store.externalRevision();
      expect(r1).toBeGreaterThan(r0);
      expect([...(await store.disabledAccounts("up")).entries()]).toEqual([["a", { reason: "upstream answered 401", at: 5 }]]);
      // Disabling again updates the reason (an upsert), and moves the revision again.
      await store.disableAccount("up", "a", "upstream answered 403", 6);
      expect((await store.disabledAccounts("up")).get("a")).toEqual({ reason: "upstream answered 403", at: 6 });
      const r2 = await store.externalRevision();
      expect(r2).toBeGreaterThan(r1);
      expect(await store.listDisabled()).toEqual([{ upstream_id: "up", account_id: "a", reason: "upstream answered 403", disabled_at: 6 }]);
      expect(await store.enableAccount("up", "a")).toBe(true);
      const r3 = await store.externalRevision();
      expect(r3).toBeGreaterThan(r2);
      expect(await store.enableAccount("up", "a")).toBe(false);
      expect(await store.externalRevision()).toBe(r3);
      expect((await store.disabledAccounts("up")).size).toBe(0);
    });

    test("snapshots are upserted per account and read back keyed upstream/account", async () => {
      const store = storeOn(open());
      await store.saveSnapshot("up", [snapshot("a", 1), snapshot("b", 0)], 100);
      await store.saveSnapshot("up", [snapshot("a", 2)], 200);
      const rows = await store.loadSnapshots();
      expect([...rows.keys()].sort()).toEqual(["up/a", "up/b"]);
      expect(rows.get("up/a")).toEqual({ snapshot: snapshot("a", 2), updatedAt: 200 });
      expect(rows.get("up/b")?.updatedAt).toBe(100);
    });

    if (name === "PostgreSQL") {
      test("a pool notices an enable made through another connection (another instance)", async () => {
        let now = 1_000_000;
        const mine = storeOn(pg.client());
        const other = storeOn(pg.client());
        const settings = { attemptTimeoutMs: 1000, maxAttempts: 3, deadlineMs: 5000, queueTimeoutMs: 2000, rateLimitCooldownMaxMs: 8000, failureThreshold: 2, failureCooldownMs: 1000, failureCooldownMaxMs: 4000 };
        const pool = new AccountPool("up", [{ id: "a", weight: 1, maxConcurrency: 1 }, { id: "b", weight: 1, maxConcurrency: 1 }], settings, mine, () => now);
        const first = await pool.run(async (ctx) => {
          if (ctx.account.id === "a") throw new AttemptFailure("auth", "credentials refused (401)", undefined, 401);
          return ctx.account.id;
        });
        expect(first.value).toBe("b");
        expect((await other.disabledAccounts("up")).has("a")).toBe(true);
        expect(await other.enableAccount("up", "a")).toBe(true);
        now += 100; // the pool's revision check comes round
        const served: string[] = [];
        for (let i = 0; i < 4; i++) served.push((await pool.run(async (ctx) => ctx.account.id)).value);
        expect(served).toContain("a");
        await pool.close();
      });
    }
  });
}
