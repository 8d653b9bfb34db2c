/**
 * The usage report (store/usage) on SQLite and on a real PostgreSQL, against an oracle that
 * counts the same requests in JavaScript: whatever mix of chat rows (written through the
 * store's batches, which keep chat_usage) and image rows (read live) a user has, over any
 * range of days, every grouping (day, model, key, and the daily series by model and by key)
 * gives the counts and credits the rows themselves give.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { UsageCounts, UsageGroup, UsageRange } from "../../src/core/usage";
import { DAY_MS, utcDay } from "../../src/core/utcDays";
import { RequestStore } from "../../src/store/requests";
import type { SqlClient } from "../../src/store/sql";
import { UsageStore, WORKBENCH_GROUP } from "../../src/store/usage";
import { openDatabase } from "../../src/store/database";
import { migrations } from "../../src/store/migrations";
import { migratePostgres } from "../../src/store/postgresDatabase";
import { postgresMigrations } from "../../src/store/postgresMigrations";
import { SqliteClient } from "../../src/store/sql";
import { bothEngines } from "../support/bothEngines";
import { startPostgres } from "../support/postgresServer";
import { tempDir } from "../support/tempDirs";

/** 2025-06-01T00:00Z: the rows fall on this day and the four after it. */
const DAY0 = Date.UTC(2025, 5, 1);
const STATUSES = ["pending", "succeeded", "failed", "interrupted"] as const;

interface Row {
  kind: "chat" | "image";
  user: 0 | 1;
  key: 0 | 1 | null;
  model: string;
  status: (typeof STATUSES)[number];
  createdAt: number;
  charged: number;
  refunded: number;
}

const chatRow = fc.record({
  kind: fc.constant("chat" as const),
  user: fc.constantFrom(0 as const, 1 as const),
  key: fc.constantFrom(0 as const, 1 as const, null),
  model: fc.constantFrom("chat-a", "chat-b"),
  status: fc.constantFrom("succeeded" as const, "failed" as const),
  // Anywhere in five days, the first and last millisecond of a day included.
  createdAt: fc.oneof(fc.integer({ min: DAY0, max: DAY0 + 5 * DAY_MS - 1 }), fc.constantFrom(DAY0, DAY0 + DAY_MS - 1, DAY0 + DAY_MS, DAY0 + 5 * DAY_MS - 1)),
  charged: fc.constant(0),
  refunded: fc.constant(0),
});
const imageRow = fc
  .record({
    kind: fc.constant("image" as const),
    user: fc.constantFrom(0 as const, 1 as const),
    key: fc.constantFrom(0 as const, 1 as const, null),
    model: fc.constantFrom("img-a", "img-b"),
    status: fc.constantFrom(...STATUSES),
    createdAt: fc.integer({ min: DAY0, max: DAY0 + 5 * DAY_MS - 1 }),
    charged: fc.integer({ min: 0, max: 3 }),
  })
  .map((r) => ({ ...r, refunded: r.status === "failed" || r.status === "interrupted" ? r.charged : 0 }));

const ZERO: UsageCounts = {
  requests: 0, image_requests: 0, images: 0, chat_requests: 0, succeeded: 0, failed: 0, pending: 0, credits_charged: 0, credits_refunded: 0, credits_spent: 0,
};

function add(to: UsageCounts, r: Row): void {
  to.requests++;
  if (r.kind === "image") to.image_requests++;
  if (r.kind === "image" && r.status === "succeeded") to.images++;
  if (r.kind === "chat") to.chat_requests++;
  if (r.status === "succeeded") to.succeeded++;
  if (r.status === "failed" || r.status === "interrupted") to.failed++;
  if (r.status === "pending") to.pending++;
  to.credits_charged += r.charged;
  to.credits_refunded += r.refunded;
  to.credits_spent += r.charged - r.refunded;
}

/** The oracle: one user's rows in the range, counted per group (and per day for the daily series). */
function expected(rows: Row[], user: 0 | 1, range: UsageRange, groupOf: (r: Row) => string, daily: boolean): Record<string, UsageCounts> {
  const out: Record<string, UsageCounts> = {};
  for (const r of rows) {
    if (r.user !== user || r.createdAt < range.fromMs || r.createdAt >= range.toMs) continue;
    const id = daily ? `${utcDay(r.createdAt)} ${groupOf(r)}` : groupOf(r);
    add((out[id] ??= { ...ZERO }), r);
  }
  return out;
}

function rangeOf(firstDay: number, days: number): UsageRange {
  const fromMs = DAY0 + firstDay * DAY_MS;
  const toMs = fromMs + days * DAY_MS;
  return { from: utcDay(fromMs), to: utcDay(toMs - DAY_MS), fromMs, toMs };
}

const countsOf = ({ group: _g, label: _l, ...counts }: UsageCounts & { group: string; label: string }) => counts;

for (const engine of bothEngines()) {
  describe(`the usage report on ${engine.name}`, () => {
    let sql: SqlClient;
    let runs = 0;
    beforeAll(async () => {
      sql = (await engine.open()).a;
    });
    afterAll(() => engine.stop());

    test("every grouping over any range equals the rows counted one by one; chat counted from chat_usage, across batches", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.oneof(chatRow, imageRow), { maxLength: 40 }),
          fc.integer({ min: 1, max: 3 }),
          fc.integer({ min: 0, max: 4 }),
          fc.integer({ min: 1, max: 5 }),
          async (rows, batches, firstDay, days) => {
            const run = ++runs;
            // Two users and two keys of their own for this run (the rows of earlier runs never show).
            const users: number[] = [];
            const keys: number[][] = [];
            for (const u of [0, 1]) {
              const user = await sql.get<{ id: number }>("INSERT INTO users (email, credits, created_at) VALUES (?, 0, 0) RETURNING id", [`usage-${run}-${u}@example.com`]);
              users.push(user!.id);
              const k: number[] = [];
              for (const n of [0, 1]) {
                const key = await sql.get<{ id: number }>("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (?, ?, ?, ?, 0) RETURNING id", [
                  user!.id, `key ${n}`, `sk-atl-u${run}${u}${n}`, `hash-${run}-${u}-${n}`,
                ]);
                k.push(key!.id);
              }
              keys.push(k);
            }
            const keyId = (r: Row) => (r.key === null ? null : keys[r.user]![r.key]!);
            const requests = new RequestStore(sql);
            const usage = new UsageStore(sql, () => requests.flushChats());
            // Chat through the store's own batches, flushed in `batches` parts; images as the charge writes them.
            let written = 0;
            for (const [i, r] of rows.entries()) {
              const id = `req_${run}_${i}`;
              if (r.kind === "chat") {
                requests.recordChat({ id, userId: users[r.user]!, keyId: keyId(r), model: r.model, status: r.status as "succeeded" | "failed", generationMs: 0 }, r.createdAt);
                if (++written % Math.ceil(rows.length / batches) === 0) expect(await requests.flushChats()).toBe(true);
              } else {
                await sql.run(
                  "INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, credits_refunded, created_at) VALUES (?, ?, ?, 'image', '/v1/images/generations', ?, ?, ?, ?, ?)",
                  [id, users[r.user]!, keyId(r), r.model, r.status, r.charged, r.refunded, r.createdAt],
                );
              }
            }
            const range = rangeOf(firstDay, days);
            const keyGroup = (r: Row) => (r.key === null ? WORKBENCH_GROUP : `sk-atl-u${run}${r.user}${r.key}`);
            const groupings: [UsageGroup, (r: Row) => string][] = [["day", (r) => utcDay(r.createdAt)], ["model", (r) => r.model], ["key", keyGroup]];
            for (const user of [0, 1] as const) {
              for (const [groupBy, groupOf] of groupings) {
                const got = await usage.usage(users[user]!, range, groupBy);
                expect(Object.fromEntries(got.map((g) => [g.group, countsOf(g)]))).toEqual(expected(rows, user, range, groupOf, false));
              }
              for (const [groupBy, groupOf] of [["model", (r: Row) => r.model], ["key", keyGroup]] as const) {
                const got = await usage.usageDaily(users[user]!, range, groupBy);
                expect(Object.fromEntries(got.map(({ day, ...g }) => [`${day} ${g.group}`, countsOf(g)]))).toEqual(expected(rows, user, range, groupOf, true));
              }
            }
            await requests.stopChats();
          },
        ),
        { numRuns: engine.name === "SQLite" ? 60 : 15 },
      );
    }, 120_000);
  });
}

for (const engine of bothEngines()) {
  describe(`chat_usage under two instances on ${engine.name}`, () => {
    afterAll(() => engine.stop());

    test("batches written at once by two instances, for the same groups in opposite orders, add up: no count lost, no deadlock", async () => {
      const { a, b } = await engine.open();
      const users: number[] = [];
      for (const n of [1, 2]) {
        users.push((await a.get<{ id: number }>("INSERT INTO users (email, credits, created_at) VALUES (?, 0, 0) RETURNING id", [`two-instances-${n}@example.com`]))!.id);
      }
      const one = new RequestStore(a);
      const two = new RequestStore(b);
      const ROUNDS = 10;
      const PER_ROUND = 30;
      for (let round = 0; round < ROUNDS; round++) {
        for (let i = 0; i < PER_ROUND; i++) {
          // Each instance's batch holds both users' rows, in opposite orders.
          const [first, second] = i % 2 === 0 ? [users[0]!, users[1]!] : [users[1]!, users[0]!];
          one.recordChat({ id: `req_one_${round}_${i}`, userId: first, keyId: null, model: "chat-a", status: "succeeded", generationMs: 0 }, DAY0 + i);
          two.recordChat({ id: `req_two_${round}_${i}`, userId: second, keyId: null, model: "chat-a", status: i % 3 === 0 ? "failed" : "succeeded", generationMs: 0 }, DAY0 + i);
        }
        const flushed = await Promise.all([one.flushChats(), two.flushChats()]);
        // SQLite's one writer may answer "busy" to one of them: its rows stay queued for the next round.
        if (engine.name === "PostgreSQL") expect(flushed).toEqual([true, true]);
      }
      expect(await one.stopChats()).toBe(true);
      expect(await two.stopChats()).toBe(true);
      const usage = new UsageStore(a);
      const total = (await Promise.all(users.map((u) => usage.usage(u, rangeOf(0, 1), "model")))).flat();
      const fromRows = await a.get<{ n: number }>("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests WHERE kind = 'chat' AND user_id IN (?, ?)", users);
      expect(Number(fromRows!.n)).toBe(2 * ROUNDS * PER_ROUND);
      expect(total.reduce((n, g) => n + g.requests, 0)).toBe(2 * ROUNDS * PER_ROUND);
      expect(total.reduce((n, g) => n + g.failed, 0)).toBe(ROUNDS * (PER_ROUND / 3));
    }, 60_000);
  });
}

describe("migration 16 on a history written before it", () => {
  const CHAT = "INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, created_at) VALUES (?, 1, ?, 'chat', '/v1/chat/completions', ?, ?, ?)";
  const rows: [string, number | null, string, string, number][] = [
    ["req_m1", 1, "chat-a", "succeeded", DAY0 + 5],
    ["req_m2", 1, "chat-a", "failed", DAY0 + DAY_MS - 1],
    ["req_m3", 1, "chat-a", "succeeded", DAY0 + DAY_MS],
    ["req_m4", null, "chat-b", "succeeded", DAY0 + 7],
    ["req_m5", null, "chat-b", "succeeded", DAY0 + 8],
  ];
  const expectedRows = [
    { day: DAY0 / DAY_MS, model: "chat-a", key_id: 1, requests: 2, succeeded: 1, failed: 1 },
    { day: DAY0 / DAY_MS, model: "chat-b", key_id: 0, requests: 2, succeeded: 2, failed: 0 },
    { day: DAY0 / DAY_MS + 1, model: "chat-a", key_id: 1, requests: 1, succeeded: 1, failed: 0 },
  ];
  const seed = async (sql: SqlClient) => {
    await sql.run("INSERT INTO users (email, credits, created_at) VALUES ('m16@example.com', 0, 0)");
    await sql.run("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (1, 'k', 'sk-atl-m16', 'h16', 0)");
    for (const r of rows) await sql.run(CHAT, r);
    // An image row: read live, never counted into chat_usage.
    await sql.run("INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, created_at) VALUES ('req_mi', 1, 1, 'image', 'e', 'img', 'succeeded', 1, ?)", [DAY0 + 9]);
  };
  const chatUsage = (sql: SqlClient) =>
    sql.all<{ day: number; model: string; key_id: number; requests: number; succeeded: number; failed: number }>(
      "SELECT day, model, key_id, requests, succeeded, failed FROM chat_usage WHERE user_id = 1 ORDER BY day, model",
    );

  test("SQLite: chat_usage holds the counts of the chat rows already written, and the report reads it", async () => {
    const dir = tempDir("atelier-m16-");
    const old = new SqliteClient(openDatabase(dir, migrations.filter((m) => m.version <= 15)));
    await seed(old);
    await old.close();
    const sql = new SqliteClient(openDatabase(dir));
    expect((await chatUsage(sql)).map((r) => ({ ...r }))).toEqual(expectedRows);
    const report = await new UsageStore(sql).usage(1, rangeOf(0, 2), "model");
    expect(report.map((g) => [g.group, g.requests, g.chat_requests, g.images])).toEqual([["chat-a", 3, 3, 0], ["chat-b", 2, 2, 0], ["img", 1, 0, 1]]);
    await sql.close();
  });

  test("PostgreSQL: the same", async () => {
    const pg = await startPostgres();
    try {
      const sql = pg.client();
      await migratePostgres(sql, postgresMigrations.filter((m) => m.version <= 15));
      await seed(sql);
      await migratePostgres(sql);
      expect((await chatUsage(sql)).map((r) => ({ ...r, day: Number(r.day), key_id: Number(r.key_id), requests: Number(r.requests), succeeded: Number(r.succeeded), failed: Number(r.failed) }))).toEqual(expectedRows);
      const report = await new UsageStore(sql).usage(1, rangeOf(0, 2), "model");
      expect(report.map((g) => [g.group, g.requests, g.chat_requests, g.images])).toEqual([["chat-a", 3, 3, 0], ["chat-b", 2, 2, 0], ["img", 1, 0, 1]]);
    } finally {
      await pg.stop();
    }
  });
});
