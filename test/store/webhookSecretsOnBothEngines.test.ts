/**
 * A rotation's previous signing secret in store/webhooks, on SQLite and on a real PostgreSQL:
 * rotateSecret moves the current secret to previous_secret_sealed in the same statement (one
 * previous at most; none when there was no secret, or when no overlap is asked for), and
 * dropExpiredPreviousSecrets deletes only expired ones, of one user or of everyone. Two pools
 * rotating one user's secret at once end in a state some serial order gives.
 */
import { afterAll, describe, expect, test } from "bun:test";
import type { SqlClient } from "../../src/store/sql";
import { WebhookStore } from "../../src/store/webhooks";
import { bothEngines } from "../support/bothEngines";

const NOW = 1_700_000_000_000;
const DAY = 86_400_000;

async function userIds(sql: SqlClient, n: number): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i++) {
    await sql.run(`INSERT INTO users (email, password_hash, role, credits, created_at) VALUES ('s${i}@example.test', NULL, 'user', 0, 0)`);
    ids.push((await sql.get<{ id: number }>(`SELECT id FROM users WHERE email = 's${i}@example.test'`))!.id);
  }
  return ids;
}

/** The secret columns of a user's row: [current, created, previous, expires]. */
async function secrets(hooks: WebhookStore, userId: number): Promise<[string | null, number | null, string | null, number | null] | null> {
  const row = await hooks.endpoint(userId);
  return row && [row.secret_sealed, row.secret_created_at, row.previous_secret_sealed, row.previous_secret_expires_at];
}

for (const engine of bothEngines()) {
  describe(engine.name, () => {
    afterAll(() => engine.stop());

    test("the first secret has no previous; each rotation keeps the one it replaces until the given time, one at most; null keeps none", async () => {
      const { a } = await engine.open();
      const hooks = new WebhookStore(a);
      const [fresh, withUrl] = await userIds(a, 2);
      // No row yet, and a row the endpoint made without a secret: nothing to keep either way.
      await hooks.rotateSecret(fresh!, "v1.first", NOW, NOW + DAY);
      expect(await secrets(hooks, fresh!)).toEqual(["v1.first", NOW, null, null]);
      await hooks.setEndpointUrl(withUrl!, "https://hooks.example/in", NOW);
      await hooks.rotateSecret(withUrl!, "v1.first", NOW, NOW + DAY);
      expect(await secrets(hooks, withUrl!)).toEqual(["v1.first", NOW, null, null]);
      expect((await hooks.endpoint(withUrl!))!.url).toBe("https://hooks.example/in");

      await hooks.rotateSecret(fresh!, "v1.second", NOW + 10, NOW + 10 + DAY);
      expect(await secrets(hooks, fresh!)).toEqual(["v1.second", NOW + 10, "v1.first", NOW + 10 + DAY]);
      // Again during the overlap: the current one becomes the previous, with the new expiry; "first" is gone.
      await hooks.rotateSecret(fresh!, "v1.third", NOW + 20, NOW + 20 + DAY);
      expect(await secrets(hooks, fresh!)).toEqual(["v1.third", NOW + 20, "v1.second", NOW + 20 + DAY]);
      // Without an overlap: the previous goes too.
      await hooks.rotateSecret(fresh!, "v1.fourth", NOW + 30, null);
      expect(await secrets(hooks, fresh!)).toEqual(["v1.fourth", NOW + 30, null, null]);
    });

    test("the key's check value: absent until claimed, the first claim stays (two pools claiming at once agree), forgetSecrets drops it with every secret", async () => {
      const { a, b } = await engine.open();
      const [ha, hb] = [new WebhookStore(a), new WebhookStore(b)];
      const [u1, u2] = await userIds(a, 2);
      expect(await ha.keyCheck()).toBeNull();
      expect(await ha.anySealedSecret()).toBeNull();
      const [x, y] = [new Uint8Array(32).fill(1), new Uint8Array(32).fill(2)];
      const claimed = await Promise.all([ha.claimKeyCheck(x, NOW), hb.claimKeyCheck(y, NOW)]);
      expect(claimed[0]).toEqual(claimed[1]);
      const first = claimed[0]!;
      const firstIsX = Buffer.from(first).equals(Buffer.from(x));
      expect(firstIsX || Buffer.from(first).equals(Buffer.from(y))).toBe(true);
      // A later claim with the other value changes nothing and is told the stored one.
      expect(await hb.claimKeyCheck(firstIsX ? y : x, NOW + 1)).toEqual(first);
      expect(await ha.keyCheck()).toEqual(first);
      // A sealed secret is found.
      await ha.rotateSecret(u1!, "v1.one", NOW, NOW + DAY);
      await ha.rotateSecret(u2!, "v1.two", NOW, NOW + DAY);
      expect(await hb.anySealedSecret()).toMatchObject({ sealed: expect.stringMatching(/^v1\.(one|two)$/) });
      expect(await hb.forgetSecrets()).toBe(2);
      expect(await secrets(ha, u1!)).toEqual([null, null, null, null]);
      expect(await ha.keyCheck()).toBeNull();
      expect(await ha.anySealedSecret()).toBeNull();
      expect(await ha.forgetSecrets()).toBe(0);
    });

    test("expired previous secrets are dropped, of one user or of everyone; one not yet expired stays", async () => {
      const { a } = await engine.open();
      const hooks = new WebhookStore(a);
      const [u1, u2, u3] = await userIds(a, 3);
      for (const u of [u1!, u2!, u3!]) await hooks.rotateSecret(u, `v1.old${u}`, NOW, null);
      await hooks.rotateSecret(u1!, "v1.new1", NOW, NOW + 100);
      await hooks.rotateSecret(u2!, "v1.new2", NOW, NOW + 100);
      await hooks.rotateSecret(u3!, "v1.new3", NOW, NOW + 200);

      expect(await hooks.dropExpiredPreviousSecrets(NOW + 99, u1!)).toBe(0);
      expect(await secrets(hooks, u1!)).toEqual(["v1.new1", NOW, `v1.old${u1}`, NOW + 100]);
      // At the expiry it is expired; only the user named.
      expect(await hooks.dropExpiredPreviousSecrets(NOW + 100, u1!)).toBe(1);
      expect(await secrets(hooks, u1!)).toEqual(["v1.new1", NOW, null, null]);
      expect((await secrets(hooks, u2!))![2]).toBe(`v1.old${u2}`);
      // Everyone's: u2's has expired, u3's has not.
      expect(await hooks.dropExpiredPreviousSecrets(NOW + 150)).toBe(1);
      expect(await secrets(hooks, u2!)).toEqual(["v1.new2", NOW, null, null]);
      expect(await secrets(hooks, u3!)).toEqual(["v1.new3", NOW, `v1.old${u3}`, NOW + 200]);
      expect(await hooks.dropExpiredPreviousSecrets(NOW + 150)).toBe(0);
    });

    test("a drop that finds the secret rotated again since it read the row keeps the new previous one", async () => {
      const { a } = await engine.open();
      const hooks = new WebhookStore(a);
      const [u] = await userIds(a, 1);
      await hooks.rotateSecret(u!, "v1.a", NOW, null);
      await hooks.rotateSecret(u!, "v1.b", NOW, NOW + 100);
      // An attempt at NOW + 150 saw "a" expired; meanwhile the user rotated to "c" ("b" kept a day).
      await hooks.rotateSecret(u!, "v1.c", NOW + 140, NOW + 140 + DAY);
      expect(await hooks.dropExpiredPreviousSecrets(NOW + 150, u!)).toBe(0);
      expect(await secrets(hooks, u!)).toEqual(["v1.c", NOW + 140, "v1.b", NOW + 140 + DAY]);
    });

    test("two instances rotating one user's secret at once: the result is some serial order, never a lost secret", async () => {
      const { a, b } = await engine.open();
      const [u] = await userIds(a, 1);
      const hooksA = new WebhookStore(a);
      const hooksB = new WebhookStore(b);
      await hooksA.rotateSecret(u!, "v1.start", NOW, null);
      let current = "v1.start";
      for (let round = 0; round < 20; round++) {
        const [x, y] = [`v1.a${round}`, `v1.b${round}`];
        await Promise.all([hooksA.rotateSecret(u!, x, NOW + round, NOW + DAY), hooksB.rotateSecret(u!, y, NOW + round, NOW + DAY)]);
        const [now, , previous] = (await secrets(hooksA, u!))!;
        // Whichever went second replaced the first one's secret, which is now the previous.
        expect([[x, y], [y, x]]).toContainEqual([previous!, now!]);
        expect(previous).not.toBe(current);
        current = now!;
      }
    });
  });
}
