/**
 * The webhook claim (store/webhooks claimDue) shares the slots between users, on SQLite and on
 * a real PostgreSQL: round robin by each user's oldest due, at most `perUser` a user counting
 * what the caller already holds for them, and never a row twice across two pools. It takes
 * exactly the rows that rule names (an oracle in JavaScript, over random backlogs and held
 * maps), and reads a few rows a user to find them, never the whole backlog: SQLite's plan
 * searches the users' due index only, PostgreSQL's executed plan reads a bounded number of rows.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { SqlClient, SqlValue } from "../../src/store/sql";
import { FEW_DUE_DELIVERIES, WebhookStore } from "../../src/store/webhooks";
import { bothEngines } from "../support/bothEngines";

const NOW = 1_700_000_000_000;
const LEASE = NOW + 60_000;

async function userIds(sql: SqlClient, n: number): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i++) {
    await sql.run(`INSERT INTO users (email, password_hash, role, credits, created_at) VALUES ('u${i}@example.test', NULL, 'user', 0, 0)`);
    ids.push((await sql.get<{ id: number }>(`SELECT id FROM users WHERE email = 'u${i}@example.test'`))!.id);
  }
  return ids;
}

/** `count` deliveries of one user, each a millisecond older than the next, from `from`. */
async function backlog(hooks: WebhookStore, userId: number, count: number, from: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    await hooks.enqueue([{ eventId: `msg_${userId}_${i}`, userId, eventType: "image.task.failed", source: "endpoint", url: "https://x.example/", payload: "{}" }], from + i);
  }
}

/**
 * The statement claimDue's walk would run on `sql`, with its parameters, without running it (its
 * first look, the count of due rows, is answered "more than a few", which takes the walk).
 */
async function claimStatement(sql: SqlClient, ...args: Parameters<WebhookStore["claimDue"]>): Promise<[string, readonly SqlValue[]]> {
  const statements: [string, readonly SqlValue[]][] = [];
  const unexpected = () => Promise.reject(new Error("the claim is one statement, read with all()"));
  const recording: SqlClient = {
    dialect: sql.dialect,
    all: async (q, params = []) => (statements.push([q, params]), []),
    get: async <T>(q: string) => (q.includes("SELECT COUNT(*) AS n FROM (SELECT 1 FROM webhook_deliveries") ? ({ n: Number.MAX_SAFE_INTEGER } as T) : unexpected()),
    run: unexpected,
    transaction: unexpected,
    exec: unexpected,
    close: async () => {},
  };
  await new WebhookStore(recording).claimDue(...args);
  expect(statements.length).toBe(1);
  return statements[0]!;
}

interface BacklogRow {
  user: number;
  state: "pending" | "delivered" | "failed";
  /** Milliseconds from NOW: at or before it is due; few values, so due times tie (broken by id). */
  dueIn: number;
}

/**
 * The rule, in JavaScript: each user's due rows by (due time, id) get turns 1, 2, … after what
 * they hold; a turn past perUser is not taken; rows go by (turn, due time, id), `limit` of them.
 */
function roundRobin(rows: { id: number; user: number; due: number | null }[], limit: number, perUser: number, held: ReadonlyMap<number, number>): number[] {
  const byUser = new Map<number, { id: number; due: number }[]>();
  for (const r of rows) if (r.due !== null && r.due <= NOW) byUser.set(r.user, [...(byUser.get(r.user) ?? []), { id: r.id, due: r.due }]);
  const turns: { id: number; due: number; turn: number }[] = [];
  for (const [user, due] of byUser) {
    due.sort((a, b) => a.due - b.due || a.id - b.id);
    due.forEach((r, i) => turns.push({ ...r, turn: i + 1 + (held.get(user) ?? 0) }));
  }
  return turns
    .filter((r) => r.turn <= perUser)
    .sort((a, b) => a.turn - b.turn || a.due - b.due || a.id - b.id)
    .slice(0, limit)
    .map((r) => r.id);
}

const backlogRow: fc.Arbitrary<BacklogRow> = fc.record({
  user: fc.integer({ min: 0, max: 4 }),
  state: fc.constantFrom("pending", "pending", "pending", "delivered", "failed"),
  dueIn: fc.constantFrom(-3_000, -2_000, -1_000, 0, 1_000),
});

for (const engine of bothEngines()) {
  describe(engine.name, () => {
    afterAll(() => engine.stop());

    test("a user's backlog older than everyone's gets perUser slots; the others' firsts come before anyone's second", async () => {
      const { a } = await engine.open();
      const hooks = new WebhookStore(a);
      const [mallory, alice, bob] = await userIds(a, 3);
      await backlog(hooks, mallory!, 40, NOW - 1_000);
      await backlog(hooks, alice!, 3, NOW - 10);
      await backlog(hooks, bob!, 1, NOW - 5);
      const owners = (rows: { user_id: number }[]) => rows.map((r) => r.user_id).sort();
      // 8 free slots, 2 a user: mallory's 40 older rows get 2, alice 2, bob his 1.
      const first = await hooks.claimDue(NOW, 8, LEASE, 2);
      expect(owners(first)).toEqual([mallory, mallory, alice, alice, bob].sort() as number[]);
      // Oldest first within a user.
      expect(first.filter((r) => r.user_id === mallory).map((r) => r.event_id).sort()).toEqual([`msg_${mallory}_0`, `msg_${mallory}_1`]);
      // Only 3 slots: every user's first before anyone's second.
      const second = (await engine.open()).a;
      const fresh = new WebhookStore(second);
      const [m2, a2, b2] = await userIds(second, 3);
      await backlog(fresh, m2!, 10, NOW - 1_000);
      await backlog(fresh, a2!, 3, NOW - 10);
      await backlog(fresh, b2!, 1, NOW - 5);
      expect(owners(await fresh.claimDue(NOW, 3, LEASE, 2))).toEqual([m2, a2, b2].sort() as number[]);
    });

    test("what the caller holds counts: a user at perUser gets nothing more, one below gets the rest", async () => {
      const { a } = await engine.open();
      const hooks = new WebhookStore(a);
      const [mallory, alice] = await userIds(a, 2);
      await backlog(hooks, mallory!, 10, NOW - 1_000);
      await backlog(hooks, alice!, 5, NOW - 10);
      const rows = await hooks.claimDue(NOW, 8, LEASE, 2, new Map([[mallory!, 2], [alice!, 1]]));
      expect(rows.map((r) => r.event_id)).toEqual([`msg_${alice}_0`]);
      // No held map and no perUser: no cap, still round robin (mallory's older rows do not all go first).
      expect((await hooks.claimDue(NOW, 4, LEASE)).map((r) => r.user_id).sort()).toEqual([mallory, mallory, alice, alice].sort() as number[]);
      expect((await hooks.claimDue(NOW, 100, LEASE)).length).toBe(10 - 2 + 5 - 1 - 2);
    });

    test("two clients claiming at once never take the same row, and each stays within perUser", async () => {
      const { a, b } = await engine.open();
      const [ha, hb] = [new WebhookStore(a), new WebhookStore(b)];
      const users = await userIds(a, 4);
      for (const [i, u] of users.entries()) await backlog(ha, u, 15, NOW - 1_000 + i);
      const seen = new Map<number, number>();
      for (let round = 0; round < 200; round++) {
        const claims = await Promise.all([ha.claimDue(NOW, 5, LEASE, 2), hb.claimDue(NOW, 5, LEASE, 2), ha.claimDue(NOW, 3, LEASE, 1)]);
        for (const [i, rows] of claims.entries()) {
          const perUser = new Map<number, number>();
          for (const r of rows) perUser.set(r.user_id, (perUser.get(r.user_id) ?? 0) + 1);
          expect(Math.max(0, ...perUser.values())).toBeLessThanOrEqual(i === 2 ? 1 : 2);
        }
        if (claims.flat().length === 0) break;
        for (const r of claims.flat()) seen.set(r.id, (seen.get(r.id) ?? 0) + 1);
      }
      expect(seen.size).toBe(60);
      expect([...seen.values()].every((n) => n === 1)).toBe(true);
    });

    describe("against the rule, on random backlogs", () => {
      let sql: SqlClient;
      let users: number[];
      beforeAll(async () => {
        sql = (await engine.open()).a;
        users = await userIds(sql, 5);
      });

      test("the claim takes exactly the rows round robin names, leases them and no others", async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(backlogRow, { maxLength: 40, size: "max" }),
            fc.array(fc.tuple(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 5 })), { maxLength: 5 }),
            fc.integer({ min: 1, max: 12 }),
            fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }),
            // How the claim reads: 1, always the walk over users; a million, always the ranking of every due row.
            fc.constantFrom(1, 1_000_000),
            async (backlog, heldPairs, limit, perUser, fewDue) => {
              await sql.run("DELETE FROM webhook_deliveries");
              const rows: { id: number; user: number; due: number | null }[] = [];
              for (const [i, r] of backlog.entries()) {
                const user = users[r.user]!;
                const due = r.state === "pending" ? NOW + r.dueIn : null;
                const { id } = (await sql.get<{ id: number }>(
                  `INSERT INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, attempts, next_attempt_at, created_at, finished_at)
                   VALUES (?, ?, 'image.task.failed', 'endpoint', 'https://x.example/', '{}', ?, 0, ?, ?, ?) RETURNING id`,
                  [`msg_${i}`, user, r.state, due, NOW - 10_000, due === null ? NOW - 5_000 : null],
                ))!;
                rows.push({ id, user, due });
              }
              const held = new Map(heldPairs.map(([u, n]) => [users[u]!, n]));
              const expected = roundRobin(rows, limit, perUser ?? limit, held).sort((a, b) => a - b);
              const claimed = await new WebhookStore(sql, fewDue).claimDue(NOW, limit, LEASE, perUser, held);
              expect(claimed.map((r) => r.id).sort((a, b) => a - b)).toEqual(expected);
              expect(claimed.every((r) => r.next_attempt_at === LEASE && r.state === "pending")).toBe(true);
              const leased = await sql.all<{ id: number }>("SELECT id FROM webhook_deliveries WHERE next_attempt_at = ? ORDER BY id", [LEASE]);
              expect(leased.map((r) => r.id)).toEqual(expected);
            },
          ),
          { numRuns: engine.name === "SQLite" ? 300 : 60 },
        );
      }, 120_000);
    });

    test("a claim reads a few rows a user to find its rows, never the whole backlog", async () => {
      const { a: sql } = await engine.open();
      // One user's receiver is down: 20 000 due behind it, and as many delivered; 40 users with 3 due each.
      const [mallory, ...others] = await userIds(sql, 41);
      const insert = (user: number, count: number, state: "pending" | "delivered", from: number) =>
        sql.run(
          `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
           INSERT INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, attempts, next_attempt_at, created_at, finished_at)
           SELECT 'msg_' || ? || '_' || ? || '_' || i, ?, 'image.task.succeeded', 'request', 'https://x.example/', '{}', ?, 0,
                  CASE WHEN ? = 'pending' THEN ? + i END, ? + i, CASE WHEN ? = 'pending' THEN NULL ELSE ? + i END FROM n`,
          [count, user, state, user, state, state, from, from, state, from],
        );
      await insert(mallory!, 20_000, "pending", NOW - 100_000);
      await insert(mallory!, 20_000, "delivered", NOW - 200_000);
      for (const u of others) await insert(u, 3, "pending", NOW - 50_000);
      const args = [NOW, 16, LEASE, 4, new Map([[others[0]!, 4]])] as const;
      // It takes what the rule says: 39 users have a first turn (one holds 4 already), so 16 of
      // those, by due time: mallory's oldest, then 15 others', one each.
      const claimed = await new WebhookStore(sql).claimDue(...args);
      expect(claimed.map((r) => r.user_id).sort((x, y) => x - y)).toEqual([mallory!, ...others.slice(1, 16)]);
      expect(claimed.find((r) => r.user_id === mallory)?.event_id).toBe(`msg_${mallory}_pending_0`);
      // And the next claim (explained: on PostgreSQL run, too) finds its rows the same way.
      const [q, params] = await claimStatement(sql, ...args);
      if (engine.name === "SQLite") {
        // Every read of the table is a search: the users' due index (the next user, or a user's
        // oldest due) or a row by id. Before migration 21 the claim read every due row through
        // webhook_deliveries_due and sorted them.
        const plan = (await sql.all<{ detail: string }>(`EXPLAIN QUERY PLAN ${q}`, params)).map((r) => r.detail);
        const reads = plan.filter((line) => /^(SCAN|SEARCH) webhook_deliveries\b/.test(line));
        expect(reads.filter((line) => !/^SEARCH webhook_deliveries USING (INTEGER PRIMARY KEY \(rowid=\?\)|(COVERING )?INDEX webhook_deliveries_user_due\b)/.test(line))).toEqual([]);
        expect(plan).toContain("SEARCH webhook_deliveries USING COVERING INDEX webhook_deliveries_user_due (user_id=? AND next_attempt_at<?)");
      } else {
        await sql.run("ANALYZE webhook_deliveries");
        type PlanNode = { "Relation Name"?: string; "Actual Rows"?: number; "Actual Loops"?: number; "Rows Removed by Filter"?: number; Plans?: PlanNode[] };
        const readFromDeliveries = (node: PlanNode): number =>
          (node["Relation Name"] === "webhook_deliveries" ? ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * (node["Actual Loops"] ?? 1) : 0) +
          (node.Plans ?? []).reduce((n, p) => n + readFromDeliveries(p), 0);
        const read = await sql.transaction(async (tx) => {
          const [explained] = await tx.all<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${q}`, params);
          return readFromDeliveries(explained!["QUERY PLAN"][0].Plan);
        });
        // Per user with pending rows: one to find the next user and at most 4 (perUser) of their
        // oldest; then the 16 taken, twice (locked, then leased). Before, the 20 000 and more.
        expect(read).toBeLessThanOrEqual(42 * (1 + 4) + 2 * 16);
      }
    }, 120_000);
  });
}

test("nothing due: a claim answers from its count of due rows alone, without walking the users whose retries are to come", async () => {
  const statements: string[] = [];
  const unexpected = () => Promise.reject(new Error("unexpected statement"));
  const recording: SqlClient = {
    dialect: "sqlite",
    all: async (q) => (statements.push(q), []),
    get: async <T>(q: string) => (statements.push(q), { n: 0 } as T),
    run: unexpected,
    transaction: unexpected,
    exec: unexpected,
    close: async () => {},
  };
  expect(await new WebhookStore(recording).claimDue(NOW, 16, LEASE, 4)).toEqual([]);
  expect(statements).toEqual(["SELECT COUNT(*) AS n FROM (SELECT 1 FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= ? LIMIT ?) AS due"]);
});

test("a few due rows are ranked all at once, without walking the users whose retries are to come; from FEW_DUE_DELIVERIES on, the users are walked", async () => {
  const claimWith = async (due: number) => {
    const statements: string[] = [];
    const recording: SqlClient = {
      dialect: "sqlite",
      all: async (q) => (statements.push(q), []),
      get: async <T>(q: string) => (statements.push(q), { n: due } as T),
      run: () => Promise.reject(new Error("unexpected statement")),
      transaction: () => Promise.reject(new Error("unexpected statement")),
      exec: () => Promise.reject(new Error("unexpected statement")),
      close: async () => {},
    };
    await new WebhookStore(recording).claimDue(NOW, 16, LEASE, 4);
    expect(statements).toHaveLength(2);
    return statements[1]!;
  };
  const few = await claimWith(FEW_DUE_DELIVERIES - 1);
  expect(few).toContain("ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY next_attempt_at, id)");
  expect(few).not.toContain("RECURSIVE");
  expect(await claimWith(FEW_DUE_DELIVERIES)).toContain("WITH RECURSIVE pending_users");
});
