/**
 * The history a page at a time (store/historyPages) on SQLite and on a real PostgreSQL, against
 * an oracle that filters and sorts the same rows in JavaScript: whatever the rows (chat written
 * through the store's batches, images as the charge writes them, many sharing a millisecond),
 * the filter, the page size and the search bound,
 * - following Older from the newest page visits every matching row once, in order, and only
 *   those; a page that is not full says so (partial) unless nothing older is left;
 * - Newer from any page leads to the rows just before it, and in the end to the newest page;
 * - the total equals the number of matching rows (chat counted from chat_usage);
 * and on PostgreSQL with 50 000 rows, no statement reads more rows of requests than a page or the
 * search bound (SQLite's plans are checked in database.test.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { DAY_MS } from "../../src/core/utcDays";
import { HISTORY_SCAN_ROWS, historyPage, historyTotal, type HistoryFilter, type HistoryPage } from "../../src/store/historyPages";
import { RequestStore, type RequestRow } from "../../src/store/requests";
import type { SqlClient } from "../../src/store/sql";
import { bothEngines } from "../support/bothEngines";
import { historyStatements } from "../support/historyStatements";
import { startPostgres, type TestPostgres } from "../support/postgresServer";

const DAY0 = Date.UTC(2025, 5, 1);
const STATUSES = ["pending", "succeeded", "failed", "interrupted"] as const;

interface Row {
  kind: "chat" | "image";
  user: 0 | 1;
  key: 0 | null;
  model: "m-a" | "m-b";
  status: (typeof STATUSES)[number];
  createdAt: number;
}

// Few distinct times (ties broken by id), on three days.
const createdAt = fc.tuple(fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 3 })).map(([day, ms]) => DAY0 + day * DAY_MS + ms);
const row = fc.oneof(
  fc.record({
    kind: fc.constant("chat" as const), user: fc.constantFrom(0 as const, 1 as const), key: fc.constantFrom(0 as const, null), model: fc.constantFrom("m-a" as const, "m-b" as const),
    status: fc.constantFrom("succeeded" as const, "failed" as const), createdAt,
  }),
  fc.record({
    kind: fc.constant("image" as const), user: fc.constantFrom(0 as const, 1 as const), key: fc.constantFrom(0 as const, null), model: fc.constantFrom("m-a" as const, "m-b" as const),
    status: fc.constantFrom(...STATUSES), createdAt,
  }),
);
// Each condition in about one filter of four, so that most filters match something.
const maybe = <T>(a: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> => fc.oneof({ arbitrary: fc.constant(undefined), weight: 3 }, { arbitrary: a, weight: 1 });
const filterSpec = fc.record({
  // undefined: the admin's view of everyone's requests.
  user: maybe(fc.constantFrom(0 as const, 1 as const)),
  key: maybe(fc.constant(0 as const)),
  kind: maybe(fc.constantFrom("chat" as const, "image" as const)),
  status: maybe(fc.constantFrom(...STATUSES)),
  model: maybe(fc.constantFrom("m-a", "m-b", "m-none")),
  fromDay: maybe(fc.integer({ min: 0, max: 1 })),
  beforeDay: maybe(fc.integer({ min: 2, max: 3 })),
});

const newestFirst = (a: { created_at: number; id: string }, b: { created_at: number; id: string }) => b.created_at - a.created_at || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
const idsOf = (rows: { id: string }[]) => rows.map((r) => r.id);

for (const engine of bothEngines()) {
  describe(`history pages on ${engine.name}`, () => {
    let sql: SqlClient;
    let runs = 0;
    beforeAll(async () => {
      sql = (await engine.open()).a;
    });
    afterAll(() => engine.stop());

    test("Older visits every matching row once, in order; Newer leads back to the newest page; the total counts them", async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(row, { minLength: 5, maxLength: 40, size: "max" }), filterSpec, fc.integer({ min: 1, max: 4 }), fc.integer({ min: 5, max: 12 }), async (rows, spec, size, scanRows) => {
          const run = ++runs;
          // Each run on an empty history: the admin's view of everyone sees this run's rows alone.
          await sql.run("DELETE FROM requests");
          await sql.run("DELETE FROM chat_usage");
          const users: number[] = [];
          const keys: number[] = [];
          for (const u of [0, 1]) {
            const user = await sql.get<{ id: number }>("INSERT INTO users (email, credits, created_at) VALUES (?, 0, 0) RETURNING id", [`pages-${run}-${u}@example.com`]);
            users.push(user!.id);
            const key = await sql.get<{ id: number }>("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (?, 'k', ?, ?, 0) RETURNING id", [user!.id, `sk-atl-p${run}${u}`, `hash-p-${run}-${u}`]);
            keys.push(key!.id);
          }
          const requests = new RequestStore(sql);
          for (const [i, r] of rows.entries()) {
            // Ids in an order of their own, unrelated to the times: ties must be broken by id, not by insertion.
            const id = `req_${run}_${String((i * 7) % 31).padStart(2, "0")}_${i}`;
            const keyId = r.key === null ? null : keys[r.user]!;
            if (r.kind === "chat") requests.recordChat({ id, userId: users[r.user]!, keyId, model: r.model, status: r.status as "succeeded" | "failed", generationMs: 0 }, r.createdAt);
            else await sql.run("INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, created_at) VALUES (?, ?, ?, 'image', '/v1/images/generations', ?, ?, ?)", [id, users[r.user]!, keyId, r.model, r.status, r.createdAt]);
          }
          await requests.flushChats();
          const f: HistoryFilter = {
            userId: spec.user === undefined ? undefined : users[spec.user]!, kind: spec.kind, status: spec.status, model: spec.model,
            keyId: spec.key === undefined ? undefined : keys[spec.user ?? 0]!,
            from: spec.fromDay === undefined ? undefined : DAY0 + spec.fromDay * DAY_MS,
            before: spec.beforeDay === undefined ? undefined : DAY0 + spec.beforeDay * DAY_MS,
          };
          const all = await sql.all<RequestRow>("SELECT * FROM requests");
          const expected = all
            .filter((r) => (f.userId === undefined || r.user_id === f.userId) && (f.keyId === undefined || r.key_id === f.keyId) && (!f.kind || r.kind === f.kind) && (!f.status || r.status === f.status))
            .filter((r) => (f.model === undefined || r.model === f.model) && (f.from === undefined || r.created_at >= f.from) && (f.before === undefined || r.created_at < f.before))
            .sort(newestFirst);

          expect(await historyTotal(sql, f)).toBe(expected.length);

          // Older, from the newest page to the end.
          const pages: HistoryPage[] = [await historyPage(sql, f, null, size, scanRows)];
          expect(pages[0]!.newer).toBeNull();
          while (pages.at(-1)!.older) {
            expect(pages.length).toBeLessThan(all.length + 3);
            pages.push(await historyPage(sql, f, { older: pages.at(-1)!.older! }, size, scanRows));
          }
          expect(idsOf(pages.flatMap((p) => p.rows))).toEqual(idsOf(expected));
          for (const p of pages) {
            expect(p.rows.length).toBeLessThanOrEqual(size);
            // Fewer rows than a page holds only at the end, or where the search stopped at its bound.
            if (p.rows.length < size && p.older) expect(p.partial).toBe(true);
          }
          // The newest page holds the newest matches: all it can, unless its search stopped at the bound.
          const newest = idsOf(pages[0]!.rows);
          expect(newest).toEqual(idsOf(expected.slice(0, pages[0]!.partial ? newest.length : size)));

          // Newer, from every page: the rows just before it (or the newest page), and on to the newest page.
          for (const p of pages.slice(1)) {
            const before = expected.findIndex((r) => r.id === p.rows[0]?.id);
            let at = p;
            let steps = 0;
            while (at.newer) {
              expect(++steps).toBeLessThan(all.length + 3);
              const next = await historyPage(sql, f, { newer: at.newer }, size, scanRows);
              const ids = idsOf(next.rows);
              if (next.newer === null) expect(ids).toEqual(newest);
              else if (at === p && before > 0) expect(ids).toEqual(idsOf(expected.slice(before - ids.length, before)));
              at = next;
            }
          }
          await requests.stopChats();
        }),
        { numRuns: engine.name === "SQLite" ? 150 : 40 },
      );
    }, 120_000);

    test("a page that finds too few matches within the search bound stops there and carries on from it", async () => {
      const user = (await sql.get<{ id: number }>("INSERT INTO users (email, credits, created_at) VALUES ('bound@example.com', 0, 0) RETURNING id"))!.id;
      const requests = new RequestStore(sql);
      // 30 succeeded chat rows, the oldest of them failed.
      for (let i = 0; i < 30; i++) requests.recordChat({ id: `req_bound_${String(i).padStart(2, "0")}`, userId: user, keyId: null, model: "m", status: i === 0 ? "failed" : "succeeded", generationMs: 0 }, DAY0 + i);
      await requests.flushChats();
      const f: HistoryFilter = { userId: user, status: "failed" };
      const first = await historyPage(sql, f, null, 25, 10);
      // Searched the newest 10 (29..20): nothing; the next page carries on from the 10th.
      expect(first).toEqual({ rows: [], newer: null, older: { createdAt: DAY0 + 20, id: "req_bound_20" }, partial: true });
      const second = await historyPage(sql, f, { older: first.older! }, 25, 10);
      expect(second.rows).toEqual([]);
      expect(second.older).toEqual({ createdAt: DAY0 + 10, id: "req_bound_10" });
      const third = await historyPage(sql, f, { older: second.older! }, 25, 10);
      expect(idsOf(third.rows)).toEqual(["req_bound_00"]);
      expect(third.older).toBeNull();
      expect(third.partial).toBe(false);
      expect(await historyTotal(sql, f)).toBe(1);
      expect(await historyTotal(sql, { userId: user })).toBe(30);
      await requests.stopChats();
    });
  });
}

describe("history pages on PostgreSQL with 50 000 rows, analysed", () => {
  let pg: TestPostgres | undefined;
  afterAll(() => pg?.stop());

  test("no statement of a page or a total reads more than the page or the search bound from requests", async () => {
    pg = await startPostgres({ migrated: true });
    const sql = pg.client();
    const first = (await sql.get<{ id: number }>("INSERT INTO users (email, credits, created_at) VALUES ('plans-a@example.com', 0, 0) RETURNING id"))!.id;
    const second = (await sql.get<{ id: number }>("INSERT INTO users (email, credits, created_at) VALUES ('plans-b@example.com', 0, 0) RETURNING id"))!.id;
    // Every 100th row an image; all succeeded, so a failed-only page searches its whole bound.
    await sql.run(
      `INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at)
       SELECT 'req_' || lpad(i::text, 6, '0'), CASE WHEN i % 2 = 0 THEN ? ELSE ? END, CASE WHEN i % 100 = 0 THEN 'image' ELSE 'chat' END, 'e', 'm', 'succeeded', i
         FROM generate_series(1, 50000) AS i`,
      [first, second],
    );
    await sql.run("ANALYZE requests");
    const statements = await historyStatements(sql, [first, second], { createdAt: 25_000, id: "req_025000" });
    expect(statements.length).toBeGreaterThan(30);
    // What each statement read from requests, node by node: the rows it returned and those its filter dropped.
    type PlanNode = { "Relation Name"?: string; "Actual Rows"?: number; "Actual Loops"?: number; "Rows Removed by Filter"?: number; Plans?: PlanNode[] };
    const readFromRequests = (node: PlanNode): number =>
      (node["Relation Name"] === "requests" ? ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * (node["Actual Loops"] ?? 1) : 0) +
      (node.Plans ?? []).reduce((n, p) => n + readFromRequests(p), 0);
    for (const [q, params] of statements) {
      const [explained] = await sql.all<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${q}`, params);
      const read = readFromRequests(explained!["QUERY PLAN"][0].Plan);
      // The search reads one row more than it keeps (HISTORY_SCAN_ROWS + 1); the index scan also reads
      // the rows of the cursor's own millisecond (dropped by the id condition) and an incremental sort
      // the next one after the last millisecond kept (here every row has a millisecond of its own).
      // For a user with half of all rows PostgreSQL may walk the time index and drop the other half:
      // twice that. Either way a fixed number, where the table holds 50 000 rows.
      expect(read <= 2 * (HISTORY_SCAN_ROWS + 3) ? "bounded" : `${q} ${JSON.stringify(params)} read ${read} rows`).toBe("bounded");
    }
  }, 120_000);
});
