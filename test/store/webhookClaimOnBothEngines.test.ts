/**
 * The webhook claim (store/webhooks claimDue) shares the slots between users, on SQLite and on
 * a real PostgreSQL: round robin by each user's oldest due, at most `perUser` a user counting
 * what the caller already holds for them, and never a row twice across two pools.
 */
import { afterAll, describe, expect, test } from "bun:test";
import type { SqlClient } from "../../src/store/sql";
import { WebhookStore } from "../../src/store/webhooks";
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
  });
}
